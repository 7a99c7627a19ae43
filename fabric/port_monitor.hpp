// The supervisor's watch on the RDMA ports: each port's state and error
// counters, sampled from sysfs; deltas after the baseline (taken once the
// warm-up gate opens) are the signal. The chosen port (the pre-flight's) that
// was ACTIVE at the baseline and is not now is critical; any other port going
// down warns. An error counter growing faster than its threshold, per second
// over the last sampling interval, warns.
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "health/signal.hpp"

namespace inferd::fabric {

// The counters read as errors (ports/<n>/counters and hw_counters); the others
// (data, packets) only count traffic.
const std::vector<std::string>& error_counter_names();

struct PortReading {
  std::string device;
  int port = 0;
  bool active = false;
  std::string state;  // "ACTIVE", "DOWN", ...
  std::map<std::string, uint64_t> errors;  // error_counter_names() present on this port
  bool operator==(const PortReading&) const = default;
};

// State and error counters of every port under ROOT/class/infiniband; none
// when the folder is absent or unreadable.
std::vector<PortReading> read_ports(const std::string& root);

// Growth per second, over one sampling interval, at or above which a counter
// warns; 0 never warns. A rate, not a count: a port that logs a few errors a
// day never accumulates into a warning, a burst warns while it lasts.
struct PortThresholds {
  double link_downed_per_s = 0.01;  // one link-down in up to 100 s of interval
  double errors_per_s = 1;          // any other error counter
};

// The port whose loss stops the group's collectives: the pre-flight's choice.
// An empty device: none chosen (InfiniBand, where NCCL picks): every port is.
struct ChosenPort {
  std::string device;
  int port = 0;
};

struct CounterDelta {
  std::string device;
  int port = 0;
  std::string counter;
  uint64_t since_baseline = 0;
  double per_second = 0;  // over the last interval; 0 with no earlier sample
  bool operator==(const CounterDelta&) const = default;
};

struct PortObservation {
  std::vector<PortReading> ports;     // empty: no RDMA ports (no signal is given)
  std::vector<CounterDelta> deltas;   // every error counter of a port at the baseline; empty before it
  bool baselined = false;
  health::Signal signal;              // monitor "fabric"
};

// The decision as a plain function: `baseline` empty (before the warm-up gate
// opened) is always ok. `previous` is the sample `seconds` before `now` (empty,
// or seconds <= 0: no rates yet, nothing warns for errors).
PortObservation assess(const std::vector<PortReading>& baseline, const std::vector<PortReading>& previous,
                       std::vector<PortReading> now, double seconds, const PortThresholds& thresholds,
                       const ChosenPort& chosen = {});

// sample() runs on the supervisor's thread, capture_baseline() on the one
// that opens the warm-up gate.
class PortMonitor {
 public:
  explicit PortMonitor(std::string sysfs_root, PortThresholds thresholds = {}, ChosenPort chosen = {});
  PortObservation sample();
  void capture_baseline();

 private:
  std::string root_;
  PortThresholds thresholds_;
  ChosenPort chosen_;
  std::mutex mu_;
  std::vector<PortReading> baseline_;
  std::vector<PortReading> previous_;  // the last sample's, for rates
  std::chrono::steady_clock::time_point previous_at_{};
};

}  // namespace inferd::fabric
