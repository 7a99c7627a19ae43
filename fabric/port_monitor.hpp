// The supervisor's watch on the RDMA ports: each port's state and error
// counters, sampled from sysfs; deltas after the baseline (taken once the
// warm-up gate opens) are the signal. A port that was ACTIVE at the baseline
// and is not now is critical; error counters grown past a threshold warn.
#pragma once
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

// Increases since the baseline that warn; 0 never warns.
struct PortThresholds {
  uint64_t link_downed = 1;
  uint64_t errors = 100;  // any other error counter
};

struct CounterDelta {
  std::string device;
  int port = 0;
  std::string counter;
  uint64_t since_baseline = 0;
  bool operator==(const CounterDelta&) const = default;
};

struct PortObservation {
  std::vector<PortReading> ports;     // empty: no RDMA ports (no signal is given)
  std::vector<CounterDelta> deltas;   // every error counter of a port at the baseline; empty before it
  bool baselined = false;
  health::Signal signal;              // monitor "fabric"
};

// The decision as a plain function: `baseline` empty (before the warm-up gate
// opened) is always ok.
PortObservation assess(const std::vector<PortReading>& baseline, std::vector<PortReading> now,
                       const PortThresholds& thresholds);

// sample() runs on the supervisor's thread, capture_baseline() on the one
// that opens the warm-up gate.
class PortMonitor {
 public:
  explicit PortMonitor(std::string sysfs_root, PortThresholds thresholds = {});
  PortObservation sample();
  void capture_baseline();

 private:
  std::string root_;
  PortThresholds thresholds_;
  std::mutex mu_;
  std::vector<PortReading> baseline_;
};

}  // namespace inferd::fabric
