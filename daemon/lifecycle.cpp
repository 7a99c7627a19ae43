#include "daemon/lifecycle.hpp"

#include <spdlog/spdlog.h>

namespace inferd::daemon {

std::string_view to_string(State s) {
  switch (s) {
    case State::Starting: return "Starting";
    case State::Loading: return "Loading";
    case State::Warming: return "Warming";
    case State::Serving: return "Serving";
    case State::Degraded: return "Degraded";
    case State::Recovering: return "Recovering";
    case State::Draining: return "Draining";
    case State::Stopped: return "Stopped";
    case State::Failed: return "Failed";
  }
  return "Unknown";
}

Lifecycle::Lifecycle() : started_(std::chrono::steady_clock::now()) {}

bool Lifecycle::allowed(State from, State to) {
  using enum State;
  // Stopped and Failed are final.
  if (from == Stopped || from == Failed) return false;
  if (to == Failed) return true;
  if (to == Draining) return from != Draining;
  switch (from) {
    case Starting: return to == Loading;
    case Loading: return to == Warming;
    case Warming: return to == Serving;
    case Serving: return to == Degraded || to == Recovering;
    case Degraded: return to == Serving || to == Recovering;
    case Recovering: return to == Warming;
    case Draining: return to == Stopped;
    default: return false;
  }
}

State Lifecycle::state() const { return state_.load(std::memory_order_acquire); }

std::string Lifecycle::activity() const {
  std::lock_guard lock(mu_);
  return activity_;
}

void Lifecycle::set_activity(std::string activity) {
  std::lock_guard notify(notify_mu_);
  State now;
  std::vector<ActivityObserver> observers;
  {
    std::lock_guard lock(mu_);
    if (activity == activity_) return;
    activity_ = activity;
    now = state_.load();
    observers = activity_observers_;
  }
  spdlog::info("lifecycle: {}: {}", to_string(now), activity);
  for (auto& obs : observers) obs(now, activity);
}

bool Lifecycle::transition(State to, std::string_view reason) {
  std::lock_guard notify(notify_mu_);
  State from;
  std::vector<Observer> observers;
  {
    std::lock_guard lock(mu_);
    from = state_.load();
    if (!allowed(from, to)) {
      spdlog::debug("lifecycle: refused {} -> {} ({})", to_string(from), to_string(to), reason);
      return false;
    }
    state_.store(to, std::memory_order_release);
    activity_.clear();
    ++counts_[static_cast<size_t>(from)][static_cast<size_t>(to)];
    observers = observers_;
  }
  const auto level = to == State::Failed                                 ? spdlog::level::err
                     : (to == State::Degraded || to == State::Recovering) ? spdlog::level::warn
                                                                          : spdlog::level::info;
  spdlog::log(level, "lifecycle: {} -> {}: {}", to_string(from), to_string(to), reason);
  for (auto& obs : observers) obs(from, to, reason);
  return true;
}

bool Lifecycle::admits_generation() const {
  const State s = state();
  return s == State::Serving;  // Degraded sheds: new work gets 503 until it is calm again
}

double Lifecycle::uptime_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
}

std::array<std::array<uint64_t, kStateCount>, kStateCount> Lifecycle::transition_counts() const {
  std::lock_guard lock(mu_);
  return counts_;
}

void Lifecycle::on_change(Observer obs) {
  std::lock_guard lock(mu_);
  observers_.push_back(std::move(obs));
}

void Lifecycle::on_activity(ActivityObserver obs) {
  std::lock_guard lock(mu_);
  activity_observers_.push_back(std::move(obs));
}

}  // namespace inferd::daemon
