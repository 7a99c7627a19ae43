// The step deadline monitor: suspects a wedge (a stuck kernel or collective)
// when the engine's current step has run past its deadline: max(floor, k x the
// duration expected of that step), where the expectation comes from recent steps
// of like work (tokens x context, see StepHeartbeat::begin_step), so a 2048-token
// chunk at a deep context is measured against its peers, not against decodes
// 1000 times lighter, and the deadline follows the model and hardware instead of
// one guessed constant. (systemd's watchdog hears WATCHDOG=1 from the daemon
// while this monitor finds the step in time, see daemon/daemon.hpp.)
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
  uint64_t work = 0;                     // of the step in progress
  std::chrono::nanoseconds expected{0};  // of the step in progress; zero until min_samples were recorded
  std::chrono::nanoseconds deadline{0};
  std::chrono::nanoseconds p99{0};  // zero until min_samples were recorded
  Signal signal;
};

class StepDeadlineMonitor {
 public:
  explicit StepDeadlineMonitor(const engine::StepHeartbeat& heartbeat, StepDeadlineOptions options = {});

  // The duration of a finished step and its work; from any thread.
  void record_step(std::chrono::nanoseconds duration, uint64_t work = 1);
  // p99 of the recorded durations, whatever their work; zero below min_samples.
  std::chrono::nanoseconds p99() const;
  // What a step of `work` is expected to take: the p99 of the recorded steps in
  // its work bucket (a power of two), each scaled up to `work` when lighter; with
  // none there, the heaviest lighter bucket's, scaled up by the work ratio (an
  // overestimate, as fixed costs scale too); lighter than every step recorded,
  // the lightest bucket's, not scaled down. Zero below min_samples.
  std::chrono::nanoseconds expected(uint64_t work) const;
  std::chrono::nanoseconds deadline(uint64_t work = 1) const;
  // The slowest of the recorded steps; zero when none. Under chunked prefill every
  // step of a busy engine can be that slow, so it bounds what a request's steps take.
  std::chrono::nanoseconds slowest() const;
  // Critical "wedge suspected" when the heartbeat is unhealthy for the deadline.
  StepObservation sample() const;

 private:
  struct Recorded {
    std::chrono::nanoseconds duration;
    uint64_t work;
  };
  std::vector<Recorded> recorded() const;  // empty below min_samples
  std::chrono::nanoseconds deadline_for(std::chrono::nanoseconds expected) const;

  const engine::StepHeartbeat& heartbeat_;
  StepDeadlineOptions options_;
  mutable std::mutex mu_;
  std::vector<Recorded> ring_;
  std::size_t next_ = 0;
};

}  // namespace inferd::health
