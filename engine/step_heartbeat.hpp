// The engine's step heartbeat: the scheduler loop marks the start and end of
// every step, and the supervisor asks whether the current step is overdue (a
// wedged kernel or collective). Lock-free: it is touched on every step.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>

namespace inferd::engine {

class StepHeartbeat {
 public:
  using Clock = std::chrono::steady_clock;

  // A step starts; until end_step() or set_idle() its age grows. `work` is what
  // the step computes in tokens x context (the sum over its sequences of the
  // tokens fed times the context they reach), so a monitor can expect a step's
  // duration from steps of like work.
  void begin_step(uint64_t work = 1);
  // The step finished; the engine is idle until the next begin_step().
  void end_step();
  // Progress inside a long step (e.g. one prefill chunk): restarts the age.
  void beat();
  // No work: an idle engine is always healthy.
  void set_idle();

  bool idle() const;
  // Age of the step in progress; zero when idle.
  Clock::duration step_age() const;
  uint64_t steps_completed() const;
  // Duration of the last completed step (since its begin_step or last beat()).
  Clock::duration last_step() const;
  // The work of the step in progress, and of the last completed one.
  uint64_t step_work() const;
  uint64_t last_work() const;

  // True when idle or the current step is younger than `deadline`. The fault
  // point "heartbeat.stall" makes it report a stuck step.
  bool healthy(Clock::duration deadline) const;

 private:
  static int64_t now_ns();
  // Start of the step in progress in steady-clock nanoseconds; 0 when idle.
  std::atomic<int64_t> step_start_ns_{0};
  std::atomic<uint64_t> steps_{0};
  std::atomic<int64_t> last_step_ns_{0};
  std::atomic<uint64_t> work_{1}, last_work_{1};
};

}  // namespace inferd::engine
