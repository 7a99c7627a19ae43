// The engine's step heartbeat: the scheduler loop marks the start and end of
// every step, and the supervisor asks whether the current step is overdue (a
// wedged kernel or collective). Lock-free but for the listener's call, which
// takes an uncontended lock once per step so that detaching waits for it.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>

namespace inferd::engine {

// Hears the duration of every completed step, on the engine's thread, so a
// deadline can be derived from all of them rather than from samples; keep it cheap.
class StepListener {
 public:
  virtual ~StepListener() = default;
  virtual void on_step(std::chrono::nanoseconds duration) = 0;
};

class StepHeartbeat {
 public:
  using Clock = std::chrono::steady_clock;

  // A step starts; until end_step() or set_idle() its age grows.
  void begin_step();
  // The step finished; the engine is idle until the next begin_step().
  void end_step();
  // Progress inside a long step (e.g. one prefill chunk): restarts the age.
  void beat();
  // No work: an idle engine is always healthy.
  void set_idle();
  // A step of no work (the daemon's own liveness before an engine exists): counts
  // as completed, reports no duration.
  void pulse();
  // The listener of completed steps; nullptr detaches, and returns once no call
  // to the old listener is in progress.
  void set_listener(StepListener* listener);

  bool idle() const;
  // Age of the step in progress; zero when idle.
  Clock::duration step_age() const;
  uint64_t steps_completed() const;
  // Duration of the last completed step (since its begin_step or last beat()).
  Clock::duration last_step() const;

  // True when idle or the current step is younger than `deadline`. The fault
  // point "heartbeat.stall" makes it report a stuck step.
  bool healthy(Clock::duration deadline) const;

 private:
  static int64_t now_ns();
  // Start of the step in progress in steady-clock nanoseconds; 0 when idle.
  std::atomic<int64_t> step_start_ns_{0};
  std::atomic<uint64_t> steps_{0};
  std::atomic<int64_t> last_step_ns_{0};
  std::mutex listener_mu_;
  StepListener* listener_ = nullptr;
};

}  // namespace inferd::engine
