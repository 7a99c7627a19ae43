// NVML (the NVIDIA Management Library, libnvidia-ml.so.1) loaded at run time:
// the driver ships it, so it exists only where a driver is installed, and no
// build needs it. What the GPU monitor reads of each watched GPU: Xid events,
// volatile ECC error counts, clock event (throttle) reasons, memory and
// temperature.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace inferd::health {

// Clock event reasons (nvmlClocksEventReason*, formerly *ThrottleReason*): bits
// of the mask nvmlDeviceGetCurrentClocksEventReasons answers.
namespace clock_reason {
constexpr uint64_t kGpuIdle = 0x1;
constexpr uint64_t kApplicationsClocksSetting = 0x2;
constexpr uint64_t kSwPowerCap = 0x4;
constexpr uint64_t kHwSlowdown = 0x8;
constexpr uint64_t kSyncBoost = 0x10;
constexpr uint64_t kSwThermalSlowdown = 0x20;
constexpr uint64_t kHwThermalSlowdown = 0x40;
constexpr uint64_t kHwPowerBrakeSlowdown = 0x80;
constexpr uint64_t kDisplayClockSetting = 0x100;
// The reasons that are the GPU slowing itself down for heat or power.
constexpr uint64_t kThermal = kSwThermalSlowdown | kHwThermalSlowdown;
constexpr uint64_t kPower = kSwPowerCap | kHwSlowdown | kHwPowerBrakeSlowdown;
}  // namespace clock_reason

// Named bits of a clock event reason mask, for metrics labels and reasons:
// {bit, "hw_thermal_slowdown"}, ...
struct ClockReasonName {
  uint64_t bit;
  std::string_view name;
};
const std::vector<ClockReasonName>& clock_reason_names();
// "hw_thermal_slowdown,sw_power_cap"; "" for none of the named bits.
std::string clock_reasons_text(uint64_t mask);

// One GPU as NVML read it at one sample. Fields NVML did not answer (not
// supported on this GPU, ECC off) are empty.
struct GpuReading {
  int gpu = 0;            // the index it is watched under (the engine's CUDA index)
  bool readable = false;  // the device answered the memory query
  bool lost = false;      // NVML_ERROR_GPU_IS_LOST: the GPU has fallen off the bus
  std::string error;      // why it is not readable
  uint64_t memory_used = 0, memory_total = 0;
  std::optional<unsigned> temperature_c;
  std::optional<uint64_t> ecc_corrected, ecc_uncorrected;  // volatile counts (since the driver loaded)
  std::optional<uint64_t> clock_reasons;                   // mask of clock_reason bits
  std::vector<uint64_t> xids;  // Xid critical error events since the last reading
};

// Where to find the NVML device for the engine's CUDA device `cuda_index`:
// through CUDA_VISIBLE_DEVICES when it is set (`visible`: its value, null when
// unset), as NVML numbers every GPU of the machine. Either an NVML index or a
// UUID ("GPU-..."); nullopt when `visible` does not name that device.
struct NvmlTarget {
  std::optional<unsigned> index;
  std::string uuid;
};
std::optional<NvmlTarget> nvml_target(int cuda_index, const char* visible);

// The library to load: $INFERD_NVML_LIBRARY, else "libnvidia-ml.so.1".
std::string nvml_library_path();

// One loaded NVML with the GPUs watched through it. Not thread-safe: the GPU
// monitor calls it from the supervisor's thread only.
class Nvml {
 public:
  // dlopen()s `library` and initialises NVML; nullptr, with `error` saying why,
  // when either fails (no driver: not an error for the caller).
  static std::unique_ptr<Nvml> open(const std::string& library, std::string& error);
  ~Nvml();
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  // Finds `target` and registers for its Xid events; false with `error` when
  // the device cannot be found. A device without Xid events (not supported)
  // is still watched: `warning` says so.
  bool watch(int gpu, const NvmlTarget& target, std::string& error, std::string& warning);
  // Reads a watched GPU now, with the Xid events that arrived since the last read.
  GpuReading read(int gpu);

  struct Api;

 private:
  Nvml() = default;
  void drain_events();

  std::unique_ptr<Api> api_;
};

}  // namespace inferd::health
