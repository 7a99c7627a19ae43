// The daemon's lifecycle state machine (DESIGN.md "Lifecycle"). Transitions not
// drawn there are refused; every transition is logged and counted for /metrics.
#pragma once
#include <array>
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

  Lifecycle();

  static bool allowed(State from, State to);

  State state() const;
  // Free text naming the current step inside a state (e.g. the warm-up phase).
  std::string phase() const;
  void set_phase(std::string phase);

  // Moves to `to` if allowed from the current state; false (and nothing changes) otherwise.
  bool transition(State to, std::string_view reason);

  // Generation is admitted only in Serving and Degraded.
  bool admits_generation() const;

  double uptime_s() const;
  // transitions_[from][to]: how many times each edge was taken.
  std::array<std::array<uint64_t, kStateCount>, kStateCount> transition_counts() const;

  // Called (outside the lock) after every transition, in registration order.
  void on_change(Observer obs);

 private:
  mutable std::mutex mu_;
  State state_ = State::Starting;
  std::string phase_;
  std::chrono::steady_clock::time_point started_;
  std::array<std::array<uint64_t, kStateCount>, kStateCount> counts_{};
  std::vector<Observer> observers_;
};

}  // namespace inferd::daemon
