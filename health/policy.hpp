// The recovery policy: one place that turns the monitors' signals into actions,
// with hysteresis (shedding ends only after several calm samples) and a recovery
// budget (too many recoveries in a window and the process gives up, so systemd
// restarts it from scratch).
//   any Critical       -> Recover (close, drain, reset the engine, re-warm, reopen)
//   any Shed           -> Shed    (503 new work with Retry-After)
//   calm for a while   -> Unshed
//   budget exhausted   -> Fail
#pragma once
#include <chrono>
#include <deque>
#include <string>
#include <vector>

#include "health/signal.hpp"

namespace inferd::health {

enum class Action { None, Shed, Unshed, Recover, Fail };
std::string_view action_name(Action a);

struct PolicyOptions {
  int calm_samples_to_unshed = 4;
  int max_recoveries = 3;
  std::chrono::seconds recovery_window{600};
};

struct Decision {
  Action action = Action::None;
  Level level = Level::Ok;            // the worst signal level it answered
  std::vector<std::string> monitors;  // the monitors at that level
  std::string reason;                 // their reasons, in words
};

class Policy {
 public:
  using Clock = std::chrono::steady_clock;
  explicit Policy(PolicyOptions options = {}) : opts_(options) {}

  Decision decide(const std::vector<Signal>& signals, Clock::time_point now = Clock::now());
  int recoveries_in_window(Clock::time_point now = Clock::now());
  const PolicyOptions& options() const { return opts_; }

 private:
  PolicyOptions opts_;
  bool shedding_ = false;
  int calm_ = 0;
  std::deque<Clock::time_point> recoveries_;
};

}  // namespace inferd::health
