#include "daemon/supervisor_actions.hpp"

#include <spdlog/spdlog.h>

#include "daemon/daemon.hpp"
#include "daemon/engine_host.hpp"
#include "daemon/logging.hpp"
#include "daemon/warmup_host.hpp"

namespace inferd::daemon {

using namespace std::chrono;

SupervisorActions::SupervisorActions(Daemon& daemon, EngineHost& engines, WarmupHost& warmup, RecoveryHooks hooks)
    : daemon_(daemon), engines_(engines), warmup_(warmup), hooks_(std::move(hooks)) {
  Metrics& m = daemon.metrics();
  recoveries_ = &m.counter("inferd_recoveries_total", "Recoveries the supervisor ran to completion");
  sheds_ = &m.counter("inferd_sheds_total", "Times the supervisor started shedding load");
  mttr_ = &m.gauge("inferd_recovery_seconds", "Duration of the last recovery, from decision to reopened");
}

SupervisorActions::~SupervisorActions() {
  if (recovery_.joinable()) recovery_.join();
}

std::vector<DecisionRecord> SupervisorActions::decisions() const {
  std::lock_guard lk(mu_);
  return {decisions_.begin(), decisions_.end()};
}

void SupervisorActions::act(const health::Decision& d) {
  if (d.action == health::Action::None) return;
  uint64_t id = 0;
  {
    std::lock_guard lk(mu_);
    id = next_decision_++;
    decisions_.push_back({id, system_clock::now(), d, ""});
    if (decisions_.size() > kDecisionsKept) decisions_.pop_front();
  }
  std::string monitors;
  for (const auto& m : d.monitors) monitors += (monitors.empty() ? "" : ",") + m;
  ScopedLogFields fields({{"decision", std::to_string(id)},
                          {"action", std::string(health::action_name(d.action))},
                          {"level", std::string(health::level_name(d.level))},
                          {"monitors", monitors}});
  spdlog::warn("supervisor: {}: {}", health::action_name(d.action), d.reason);
  Lifecycle& lc = daemon_.lifecycle();
  switch (d.action) {
    case health::Action::None: break;
    case health::Action::Shed:
      sheds_->inc();
      if (lc.transition(State::Degraded, d.reason)) lc.set_activity("shedding load: " + d.reason);
      set_outcome(id, std::string("state ") + std::string(to_string(lc.state())));
      break;
    case health::Action::Unshed:
      lc.transition(State::Serving, d.reason);
      set_outcome(id, std::string("state ") + std::string(to_string(lc.state())));
      break;
    case health::Action::Recover:
      set_outcome(id, "recovering");
      recovering_ = true;
      if (recovery_.joinable()) recovery_.join();
      recovery_ = std::thread([this, reason = d.reason, id] { recover(reason, id); });
      break;
    case health::Action::Fail:
      set_outcome(id, "failed: exit 1");
      daemon_.fail("supervisor: " + d.reason);
      break;
  }
}

void SupervisorActions::set_outcome(uint64_t decision, std::string outcome) {
  std::lock_guard lk(mu_);
  for (auto& r : decisions_)
    if (r.id == decision) r.outcome = std::move(outcome);
}

void SupervisorActions::recover(std::string reason, uint64_t decision) {
  struct Done {
    std::atomic<bool>& flag;
    ~Done() { flag = false; }
  } done{recovering_};
  const auto start = steady_clock::now();
  ScopedLogFields fields({{"decision", std::to_string(decision)}, {"action", "recover"}});
  Lifecycle& lc = daemon_.lifecycle();
  auto failed = [&](std::string why) {
    set_outcome(decision, "failed: " + why);
    daemon_.fail(std::move(why));
  };
  if (!lc.transition(State::Recovering, reason)) return set_outcome(decision, "not started: the daemon is stopping");
  try {
    auto eng = engines_.engine();
    const int timeout = daemon_.config().health.reset_timeout_ms;
    lc.set_activity("resetting the engine");
    if (auto why = eng->reset(reason, milliseconds(timeout))) return failed(fmt::format("{} ({})", *why, reason));
    if (!lc.transition(State::Warming, "engine reset; warming again")) return set_outcome(decision, "interrupted");
    warmup_.warm(daemon_, warmup::Depth::least);
    hooks_.warmed();
    eng->release_held();
    if (!lc.transition(State::Serving, "recovered from: " + reason)) return set_outcome(decision, "interrupted");
  } catch (const std::exception& e) {
    if (!daemon_.stopping()) failed(std::string("recovery failed: ") + e.what());
    else set_outcome(decision, "interrupted: the daemon is stopping");
    return;
  }
  const double secs = duration<double>(steady_clock::now() - start).count();
  recoveries_->inc();
  mttr_->set(secs);
  set_outcome(decision, fmt::format("recovered in {:.2f} s", secs));
  ScopedLogFields outcome({{"recovery_seconds", fmt::format("{:.3f}", secs)}});
  spdlog::info("supervisor: recovered in {:.2f} s (fault: {})", secs, reason);
  hooks_.reopened();  // the probe checks the answer right away
}

}  // namespace inferd::daemon
