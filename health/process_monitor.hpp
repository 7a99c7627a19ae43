// The daemon's own footprint from <root>/self: resident memory, open
// descriptors and threads. RSS growing well past its post-warm-up baseline is
// a leak to look at before it becomes memory pressure.
#pragma once
#include <atomic>
#include <cstdint>
#include <optional>

#include "health/procfs.hpp"
#include "health/signal.hpp"

namespace inferd::health {

struct ProcessOptions {
  // Warn when RSS exceeds the baseline by this share AND by at least
  // rss_growth_min_bytes (so a small process does not warn on noise).
  double rss_growth_warn = 0.25;
  uint64_t rss_growth_min_bytes = 256ull << 20;
};

struct ProcessObservation {
  bool available = false;  // status could be read and parsed
  uint64_t rss_bytes = 0;
  uint64_t threads = 0;
  std::optional<std::size_t> open_fds;  // counting includes the listing's own fd
  std::optional<uint64_t> baseline_rss;
  Signal signal;
};

// sample() runs on the supervisor's thread; capture_baseline() may run on
// another (the one that opens the warm-up gate) at the same time: the state both
// touch is atomic.
class ProcessMonitor {
 public:
  explicit ProcessMonitor(ProcessOptions options = {}, Procfs procfs = Procfs{});

  ProcessObservation sample();
  // Takes RSS now as the baseline (after warm-up); false when unreadable.
  bool capture_baseline();
  std::optional<uint64_t> baseline_rss() const;

 private:
  ProcessOptions options_;
  Procfs procfs_;
  std::atomic<uint64_t> baseline_{0};  // RSS bytes; 0: none taken
  std::atomic<bool> reported_unavailable_{false};
};

}  // namespace inferd::health
