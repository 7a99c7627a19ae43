// The step deadline monitor: suspects a wedge (a stuck kernel or collective)
// when the engine's current step has run past its deadline: max(floor, k x p99
// of recent step durations), so the deadline follows the model and hardware
// instead of one guessed constant. (Not systemd's watchdog: that one hears
// WATCHDOG=1 from the daemon, see daemon/daemon.hpp.)
// sample() only reads the heartbeat's atomics and this class's own ring, so it
// answers from the supervisor thread while the engine thread is stuck.
#pragma once
#include <chrono>
#include <cstdint>
#include <mutex>
#include <vector>

#include "engine/step_heartbeat.hpp"
#include "health/signal.hpp"

namespace inferd::health {

struct StepDeadlineOptions {
  std::chrono::nanoseconds floor = std::chrono::seconds(10);
  double p99_factor = 10.0;
  std::size_t window = 512;      // recent step durations kept
  std::size_t min_samples = 32;  // fewer: the floor alone
};

struct StepObservation {
  bool idle = true;
  uint64_t steps_completed = 0;
  std::chrono::nanoseconds step_age{0};
  std::chrono::nanoseconds deadline{0};
  std::chrono::nanoseconds p99{0};  // zero until min_samples were recorded
  Signal signal;
};

class StepDeadlineMonitor {
 public:
  explicit StepDeadlineMonitor(const engine::StepHeartbeat& heartbeat, StepDeadlineOptions options = {});

  // The duration of a finished step; from any thread.
  void record_step(std::chrono::nanoseconds duration);
  // p99 of the recorded durations; zero below min_samples.
  std::chrono::nanoseconds p99() const;
  std::chrono::nanoseconds deadline() const;
  // The slowest of the recorded steps; zero when none. Under chunked prefill every
  // step of a busy engine can be that slow, so it bounds what a request's steps take.
  std::chrono::nanoseconds slowest() const;
  // Critical "wedge suspected" when the heartbeat is unhealthy for the deadline.
  StepObservation sample() const;

 private:
  std::chrono::nanoseconds deadline_for(std::chrono::nanoseconds p99) const;

  const engine::StepHeartbeat& heartbeat_;
  StepDeadlineOptions options_;
  mutable std::mutex mu_;
  std::vector<std::chrono::nanoseconds> ring_;
  std::size_t next_ = 0;
};

}  // namespace inferd::health
