// Memory headroom from meminfo: MemAvailable against absolute floors that scale
// with the machine, and against a baseline taken once the engine is warm.
#pragma once
#include <atomic>
#include <cstdint>
#include <optional>

#include "health/procfs.hpp"
#include "health/signal.hpp"

namespace inferd::health {

// A floor in bytes, as a share of MemTotal, or the smaller of both, so one
// configuration suits a laptop and a large server alike.
struct MemFloor {
  uint64_t bytes = 0;    // 0: not used
  double fraction = 0;   // of MemTotal; 0: not used
  // 0 (no floor) when neither is set.
  uint64_t resolve(uint64_t mem_total) const;
};

struct MeminfoOptions {
  MemFloor warn{12'000'000'000, 0.25};
  MemFloor shed{8ull << 30, 0.15};  // also the start-up reserve
  MemFloor critical{1ull << 30, 0.05};
  // MemAvailable below the baseline by at least this share of it; 0 disables.
  double relative_warn = 0.25;
  double relative_shed = 0.50;
};

struct MeminfoObservation {
  bool available = false;  // meminfo could be read and parsed
  uint64_t mem_total = 0, mem_available = 0, swap_total = 0, swap_free = 0;  // bytes
  uint64_t warn_floor = 0, shed_floor = 0, critical_floor = 0;               // resolved
  std::optional<uint64_t> baseline;
  Signal signal;
};

// sample() runs on the supervisor's thread; capture_baseline() may run on
// another (the one that opens the warm-up gate) at the same time: the state both
// touch is atomic.
class MeminfoMonitor {
 public:
  explicit MeminfoMonitor(MeminfoOptions options = {}, Procfs procfs = Procfs{});

  MeminfoObservation sample();
  // Takes MemAvailable now as the baseline (after warm-up); false when unreadable.
  bool capture_baseline();
  std::optional<uint64_t> baseline() const;
  // Whether taking `bytes` more still leaves MemAvailable at or above the shed
  // floor, for refusing to start. True when meminfo cannot be read: the
  // monitor reports unavailable instead of blocking start-up on a guess.
  bool has_reserve(uint64_t bytes);

 private:
  MeminfoOptions options_;
  Procfs procfs_;
  std::atomic<uint64_t> baseline_{0};  // MemAvailable bytes; 0: none taken
  std::atomic<bool> reported_unavailable_{false};
};

}  // namespace inferd::health
