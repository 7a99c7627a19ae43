// The daemon's lifecycle state machine (DESIGN.md "Lifecycle"). Transitions not
// drawn there are refused; every transition is logged and counted for /metrics.
#pragma once
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace inferd::daemon {

enum class State { Starting, Loading, Warming, Serving, Degraded, Recovering, Draining, Stopped, Failed };
inline constexpr size_t kStateCount = 9;

std::string_view to_string(State s);

class Lifecycle {
 public:
  using Observer = std::function<void(State from, State to, std::string_view reason)>;
  using ActivityObserver = std::function<void(State state, std::string_view activity)>;

  Lifecycle();

  static bool allowed(State from, State to);

  // Lock-free, so log sinks may read it from anywhere.
  State state() const;
  // What the daemon is doing within its state, in words: load progress, the
  // warm-up's phase and requests, the cause of shedding, a recovery's engine
  // reset. A transition clears it.
  std::string activity() const;
  void set_activity(std::string activity);

  // Moves to `to` if allowed from the current state; false (and nothing changes) otherwise.
  bool transition(State to, std::string_view reason);

  // New generation is admitted only in Serving; Degraded sheds it (work already
  // admitted runs on).
  bool admits_generation() const;

  double uptime_s() const;
  // transitions_[from][to]: how many times each edge was taken.
  std::array<std::array<uint64_t, kStateCount>, kStateCount> transition_counts() const;

  // Called (outside the state lock, one notification at a time, in registration
  // order) after every transition; activity observers after every set_activity().
  void on_change(Observer obs);
  void on_activity(ActivityObserver obs);

 private:
  mutable std::mutex mu_;
  // Serialises notifications so observers see transitions in the order they
  // happened; recursive so an observer may itself call transition().
  std::recursive_mutex notify_mu_;
  std::atomic<State> state_ = State::Starting;
  std::string activity_;
  std::chrono::steady_clock::time_point started_;
  std::array<std::array<uint64_t, kStateCount>, kStateCount> counts_{};
  std::vector<Observer> observers_;
  std::vector<ActivityObserver> activity_observers_;
};

}  // namespace inferd::daemon
