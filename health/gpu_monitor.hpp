// The supervisor's watch on the GPUs through NVML (health/nvml.hpp): per GPU,
// Xid events, volatile ECC counts, clock event (throttle) reasons, memory and
// temperature.
//   critical  an Xid that means the GPU or its memory cannot be trusted (79
//             fallen off the bus, 48 double-bit ECC, 94/95 contained and
//             uncontained ECC, 63/64 row remapping), an uncorrected ECC error
//             counted since the baseline, or the GPU lost (NVML_ERROR_GPU_IS_LOST).
//             It holds until the next recovery's rebaseline: a context that saw
//             it is not trusted before the engine was reset.
//   warn      any other Xid, clocks slowed for heat or power, a GPU NVML cannot read
// Without the NVML library (no driver) the monitor is inactive: it logs once
// and gives no signal, or an ok one saying so when the engine runs on CUDA.
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "health/nvml.hpp"
#include "health/signal.hpp"

namespace inferd::health {

// Whether Xid `xid` makes the GPU's state untrustworthy (critical), and what it means.
bool xid_is_critical(uint64_t xid);
std::string xid_text(uint64_t xid);

// One GPU's level from its reading: `uncorrected_baseline` is its volatile
// uncorrected ECC count at the baseline (nullopt: none taken), `xids` every
// Xid since the baseline (this reading's included).
Signal assess_gpu(const GpuReading& now, std::optional<uint64_t> uncorrected_baseline,
                  const std::vector<uint64_t>& xids);

struct GpuObservation {
  bool active = false;          // NVML loaded and at least one GPU watched
  std::vector<GpuReading> gpus;
  Signal signal;                // monitor "gpu"; every GPU's, the worst level
  bool give_signal = false;     // active, or inactive where it should have been (say so)
};

struct GpuMonitorOptions {
  std::vector<int> gpus;        // the CUDA indices to watch; none: the monitor does nothing
  std::string library;          // nvml_library_path()
  bool engine_on_cuda = false;  // then an inactive monitor says why in its (ok) signal
  const char* cuda_visible_devices = nullptr;
};

// sample() on the supervisor's thread; rebaseline() from any (it takes effect
// at the next sample); xid_counts() from /metrics scrapes.
class GpuMonitor {
 public:
  explicit GpuMonitor(GpuMonitorOptions options);
  ~GpuMonitor();
  GpuObservation sample();
  // After a recovery: Xids and ECC errors count from here.
  void rebaseline();
  // Xid events per (gpu, xid) since the start.
  std::map<std::pair<int, uint64_t>, uint64_t> xid_counts() const;

 private:
  void start();

  GpuMonitorOptions opts_;
  bool started_ = false;
  std::string inactive_;  // why the monitor does nothing; empty when active
  std::unique_ptr<Nvml> nvml_;
  std::vector<int> watched_;
  std::map<int, std::optional<uint64_t>> uncorrected_baseline_;
  std::map<int, std::optional<uint64_t>> uncorrected_last_;
  std::map<int, std::vector<uint64_t>> xids_since_baseline_;
  std::atomic<bool> rebaseline_{false};  // asked from the recovery's thread, done at the next sample
  mutable std::mutex counts_mu_;
  std::map<std::pair<int, uint64_t>, uint64_t> xid_counts_;
};

}  // namespace inferd::health
