#include "engine/step_heartbeat.hpp"

#include <algorithm>

#include "faults/fault_points.hpp"

namespace inferd::engine {

int64_t StepHeartbeat::now_ns() {
  // Never 0, which means idle.
  return std::max<int64_t>(1, std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count());
}

void StepHeartbeat::begin_step(uint64_t work) {
  work_.store(std::max<uint64_t>(1, work), std::memory_order_relaxed);
  step_start_ns_.store(now_ns(), std::memory_order_relaxed);
}

void StepHeartbeat::end_step() {
  const int64_t start = step_start_ns_.exchange(0, std::memory_order_relaxed);
  if (start != 0) last_step_ns_.store(std::max<int64_t>(0, now_ns() - start), std::memory_order_relaxed);
  last_work_.store(work_.load(std::memory_order_relaxed), std::memory_order_relaxed);
  // Release: a reader that sees the new count sees this step's duration and work.
  steps_.fetch_add(1, std::memory_order_release);
}

uint64_t StepHeartbeat::step_work() const { return work_.load(std::memory_order_relaxed); }

uint64_t StepHeartbeat::last_work() const { return last_work_.load(std::memory_order_relaxed); }

void StepHeartbeat::beat() { step_start_ns_.store(now_ns(), std::memory_order_relaxed); }

void StepHeartbeat::set_idle() { step_start_ns_.store(0, std::memory_order_relaxed); }

bool StepHeartbeat::idle() const { return step_start_ns_.load(std::memory_order_relaxed) == 0; }

StepHeartbeat::Clock::duration StepHeartbeat::step_age() const {
  const int64_t start = step_start_ns_.load(std::memory_order_relaxed);
  if (start == 0) return Clock::duration::zero();
  return std::chrono::nanoseconds(std::max<int64_t>(0, now_ns() - start));
}

StepHeartbeat::Clock::duration StepHeartbeat::last_step() const {
  return std::chrono::nanoseconds(last_step_ns_.load(std::memory_order_relaxed));
}

uint64_t StepHeartbeat::steps_completed() const { return steps_.load(std::memory_order_acquire); }

bool StepHeartbeat::healthy(Clock::duration deadline) const {
  static const faults::FaultPoint stall("heartbeat.stall");
  if (stall.armed()) return false;
  return step_age() < deadline;
}

}  // namespace inferd::engine
