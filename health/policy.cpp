#include "health/policy.hpp"

namespace inferd::health {

std::string_view action_name(Action a) {
  switch (a) {
    case Action::None: return "none";
    case Action::Shed: return "shed";
    case Action::Unshed: return "unshed";
    case Action::Recover: return "recover";
    case Action::Fail: return "fail";
  }
  return "?";
}

int Policy::recoveries_in_window(Clock::time_point now) {
  while (!recoveries_.empty() && now - recoveries_.front() > opts_.recovery_window) recoveries_.pop_front();
  return static_cast<int>(recoveries_.size());
}

Decision Policy::decide(const std::vector<Signal>& signals, Clock::time_point now) {
  Decision d;
  for (const Signal& s : signals) d.level = worst(d.level, s.level);
  for (const Signal& s : signals)
    if (s.level == d.level && d.level != Level::Ok) {
      d.reason += (d.reason.empty() ? "" : "; ") + s.monitor + ": " + s.reason;
      d.monitors.push_back(s.monitor);
    }
  auto decided = [&](Action a) {
    d.action = a;
    return d;
  };

  if (d.level == Level::Critical) {
    calm_ = 0;
    if (recoveries_in_window(now) >= opts_.max_recoveries) {
      d.reason += " (and " + std::to_string(opts_.max_recoveries) + " recoveries already in the last " +
                  std::to_string(opts_.recovery_window.count()) + " s)";
      return decided(Action::Fail);
    }
    recoveries_.push_back(now);
    shedding_ = false;  // a recovery reopens unshed; pressure that remains sheds again
    return decided(Action::Recover);
  }
  if (d.level == Level::Shed) {
    calm_ = 0;
    if (shedding_) return {};
    shedding_ = true;
    return decided(Action::Shed);
  }
  if (shedding_ && ++calm_ >= opts_.calm_samples_to_unshed) {
    shedding_ = false;
    calm_ = 0;
    d.reason = "calm for " + std::to_string(opts_.calm_samples_to_unshed) + " samples";
    return decided(Action::Unshed);
  }
  return {};
}

}  // namespace inferd::health
