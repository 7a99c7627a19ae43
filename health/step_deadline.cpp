#include "health/step_deadline.hpp"

#include <algorithm>
#include <bit>
#include <limits>

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

void StepDeadlineMonitor::record_step(std::chrono::nanoseconds duration, uint64_t work) {
  const Recorded r{duration, std::max<uint64_t>(1, work)};
  std::lock_guard lock(mu_);
  if (ring_.size() < options_.window) {
    ring_.push_back(r);
  } else {
    ring_[next_] = r;
    next_ = (next_ + 1) % options_.window;
  }
}

std::vector<StepDeadlineMonitor::Recorded> StepDeadlineMonitor::recorded() const {
  std::lock_guard lock(mu_);
  if (ring_.empty() || ring_.size() < options_.min_samples) return {};
  return ring_;
}

namespace {

// Nearest rank: the smallest value at or above 99% of the values.
std::chrono::nanoseconds nearest_p99(std::vector<std::chrono::nanoseconds> v) {
  if (v.empty()) return std::chrono::nanoseconds::zero();
  const std::size_t rank = (v.size() * 99 + 99) / 100 - 1;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(rank), v.end());
  return v[rank];
}

int work_bucket(uint64_t work) { return std::bit_width(work); }

}  // namespace

std::chrono::nanoseconds StepDeadlineMonitor::p99() const {
  std::vector<std::chrono::nanoseconds> d;
  for (const auto& r : recorded()) d.push_back(r.duration);
  return nearest_p99(std::move(d));
}

std::chrono::nanoseconds StepDeadlineMonitor::slowest() const {
  std::lock_guard lock(mu_);
  std::chrono::nanoseconds out{0};
  for (const auto& r : ring_) out = std::max(out, r.duration);
  return out;
}

std::chrono::nanoseconds StepDeadlineMonitor::expected(uint64_t work) const {
  const auto all = recorded();
  if (all.empty()) return std::chrono::nanoseconds::zero();
  work = std::max<uint64_t>(1, work);
  // The bucket to learn from: this step's own, else the heaviest lighter one,
  // else the lightest heavier one.
  const int want = work_bucket(work);
  int below = 0, above = std::numeric_limits<int>::max();
  for (const auto& r : all) {
    const int b = work_bucket(r.work);
    if (b <= want) below = std::max(below, b);
    else above = std::min(above, b);
  }
  const int from = below > 0 ? below : above;
  std::vector<std::chrono::nanoseconds> predicted;
  for (const auto& r : all) {
    if (work_bucket(r.work) != from) continue;
    const double scale = std::max(1.0, static_cast<double>(work) / static_cast<double>(r.work));
    predicted.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(r.duration * scale));
  }
  return nearest_p99(std::move(predicted));
}

std::chrono::nanoseconds StepDeadlineMonitor::deadline(uint64_t work) const { return deadline_for(expected(work)); }

std::chrono::nanoseconds StepDeadlineMonitor::deadline_for(std::chrono::nanoseconds expected) const {
  return std::max(options_.floor, std::chrono::duration_cast<std::chrono::nanoseconds>(expected * options_.p99_factor));
}

StepObservation StepDeadlineMonitor::sample() const {
  StepObservation obs;
  obs.signal.monitor = "step_deadline";
  obs.p99 = p99();
  obs.work = heartbeat_.step_work();
  obs.expected = expected(obs.work);
  obs.deadline = deadline_for(obs.expected);
  obs.idle = heartbeat_.idle();
  obs.steps_completed = heartbeat_.steps_completed();
  obs.step_age = std::chrono::duration_cast<std::chrono::nanoseconds>(heartbeat_.step_age());
  // healthy() rather than comparing the age here: it honours the heartbeat.stall fault point.
  if (!heartbeat_.healthy(obs.deadline)) {
    obs.signal.level = Level::Critical;
    const std::string basis = obs.expected.count() == 0
                                  ? std::string("too few steps recorded to expect one: the floor")
                                  : fmt::format("expected {:.3f} s", seconds(obs.expected));
    obs.signal.reason = fmt::format("wedge suspected: step running {:.3f} s, deadline {:.3f} s (work {}, {})",
                                    seconds(obs.step_age), seconds(obs.deadline), obs.work, basis);
  } else {
    obs.signal.reason = obs.idle ? "idle" : fmt::format("step running {:.3f} s of {:.3f} s", seconds(obs.step_age),
                                                        seconds(obs.deadline));
  }
  return obs;
}

}  // namespace inferd::health
