#include "health/step_deadline.hpp"

#include <algorithm>

#include <spdlog/spdlog.h>

namespace inferd::health {

namespace {
double seconds(std::chrono::nanoseconds d) { return std::chrono::duration<double>(d).count(); }
}  // namespace

StepDeadlineMonitor::StepDeadlineMonitor(const engine::StepHeartbeat& heartbeat, StepDeadlineOptions options)
    : heartbeat_(heartbeat), options_(options) {
  options_.window = std::max<std::size_t>(1, options_.window);
  ring_.reserve(options_.window);
}

void StepDeadlineMonitor::record_step(std::chrono::nanoseconds duration) {
  std::lock_guard lock(mu_);
  if (ring_.size() < options_.window) {
    ring_.push_back(duration);
  } else {
    ring_[next_] = duration;
    next_ = (next_ + 1) % options_.window;
  }
}

std::chrono::nanoseconds StepDeadlineMonitor::p99() const {
  std::vector<std::chrono::nanoseconds> copy;
  {
    std::lock_guard lock(mu_);
    if (ring_.empty() || ring_.size() < options_.min_samples) return std::chrono::nanoseconds::zero();
    copy = ring_;
  }
  // Nearest rank: the smallest value at or above 99% of the samples.
  const std::size_t rank = (copy.size() * 99 + 99) / 100 - 1;
  std::nth_element(copy.begin(), copy.begin() + static_cast<std::ptrdiff_t>(rank), copy.end());
  return copy[rank];
}

std::chrono::nanoseconds StepDeadlineMonitor::slowest() const {
  std::lock_guard lock(mu_);
  return ring_.empty() ? std::chrono::nanoseconds::zero() : *std::max_element(ring_.begin(), ring_.end());
}

std::chrono::nanoseconds StepDeadlineMonitor::deadline_for(std::chrono::nanoseconds p99) const {
  return std::max(options_.floor, std::chrono::duration_cast<std::chrono::nanoseconds>(p99 * options_.p99_factor));
}

std::chrono::nanoseconds StepDeadlineMonitor::deadline() const { return deadline_for(p99()); }

StepObservation StepDeadlineMonitor::sample() const {
  StepObservation obs;
  obs.signal.monitor = "step_deadline";
  obs.p99 = p99();
  obs.deadline = deadline_for(obs.p99);
  obs.idle = heartbeat_.idle();
  obs.steps_completed = heartbeat_.steps_completed();
  obs.step_age = std::chrono::duration_cast<std::chrono::nanoseconds>(heartbeat_.step_age());
  // healthy() rather than comparing the age here: it honours the heartbeat.stall fault point.
  if (!heartbeat_.healthy(obs.deadline)) {
    obs.signal.level = Level::Critical;
    obs.signal.reason = fmt::format("wedge suspected: step running {:.3f} s, deadline {:.3f} s (p99 {:.3f} s)",
                                    seconds(obs.step_age), seconds(obs.deadline), seconds(obs.p99));
  } else {
    obs.signal.reason = obs.idle ? "idle" : fmt::format("step running {:.3f} s of {:.3f} s", seconds(obs.step_age),
                                                        seconds(obs.deadline));
  }
  return obs;
}

}  // namespace inferd::health
