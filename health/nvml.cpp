#include "health/nvml.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <map>
#include <string>

#include <fmt/format.h>

namespace inferd::health {

// The few NVML types and entry points used here, declared by hand: no build
// machine has nvml.h (it ships with the CUDA toolkit or the driver, not with
// Debian's packages), and NVML's C ABI is stable and documented: these
// signatures, structs and constants are those of NVIDIA's nvml.h.
namespace {

using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
using nvmlEventSet_t = struct nvmlEventSet_st*;

struct nvmlMemory_t {
  unsigned long long total, free, used;
};

// As nvmlEventSetWait_v2 fills it.
struct nvmlEventData_t {
  nvmlDevice_t device;
  unsigned long long eventType;
  unsigned long long eventData;  // the Xid, for an Xid critical error event
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

constexpr nvmlReturn_t NVML_SUCCESS = 0;
constexpr nvmlReturn_t NVML_ERROR_GPU_IS_LOST = 15;
constexpr unsigned long long nvmlEventTypeXidCriticalError = 0x8;
constexpr int NVML_TEMPERATURE_GPU = 0;
constexpr int NVML_MEMORY_ERROR_TYPE_CORRECTED = 0;
constexpr int NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1;
constexpr int NVML_VOLATILE_ECC = 0;
constexpr unsigned kMaxEventsPerRead = 64;  // a storm is still bounded per sample

}  // namespace

struct Nvml::Api {
  void* lib = nullptr;
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  const char* (*error_string)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*by_index)(unsigned, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*by_uuid)(const char*, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  nvmlReturn_t (*temperature)(nvmlDevice_t, int, unsigned*) = nullptr;
  nvmlReturn_t (*ecc)(nvmlDevice_t, int, int, unsigned long long*) = nullptr;
  nvmlReturn_t (*clock_reasons)(nvmlDevice_t, unsigned long long*) = nullptr;
  nvmlReturn_t (*set_create)(nvmlEventSet_t*) = nullptr;
  nvmlReturn_t (*set_free)(nvmlEventSet_t) = nullptr;
  nvmlReturn_t (*register_events)(nvmlDevice_t, unsigned long long, nvmlEventSet_t) = nullptr;
  nvmlReturn_t (*set_wait)(nvmlEventSet_t, nvmlEventData_t*, unsigned) = nullptr;

  nvmlEventSet_t events = nullptr;
  std::map<int, nvmlDevice_t> devices;  // by watched index
  std::map<int, std::vector<uint64_t>> xids;  // arrived, not read yet

  std::string text(nvmlReturn_t r) const {
    const char* s = error_string ? error_string(r) : nullptr;
    return fmt::format("{} (NVML error {})", s ? s : "unknown", r);
  }
};

const std::vector<ClockReasonName>& clock_reason_names() {
  namespace c = clock_reason;
  static const std::vector<ClockReasonName> names = {
      {c::kGpuIdle, "gpu_idle"},
      {c::kApplicationsClocksSetting, "applications_clocks_setting"},
      {c::kSwPowerCap, "sw_power_cap"},
      {c::kHwSlowdown, "hw_slowdown"},
      {c::kSyncBoost, "sync_boost"},
      {c::kSwThermalSlowdown, "sw_thermal_slowdown"},
      {c::kHwThermalSlowdown, "hw_thermal_slowdown"},
      {c::kHwPowerBrakeSlowdown, "hw_power_brake_slowdown"},
      {c::kDisplayClockSetting, "display_clock_setting"},
  };
  return names;
}

std::string clock_reasons_text(uint64_t mask) {
  std::string out;
  for (const auto& [bit, name] : clock_reason_names())
    if (mask & bit) out.append(out.empty() ? "" : ",").append(name);
  return out;
}

std::optional<NvmlTarget> nvml_target(int cuda_index, const char* visible) {
  if (cuda_index < 0) return std::nullopt;
  if (!visible) return NvmlTarget{static_cast<unsigned>(cuda_index), {}};
  // A comma-separated list of indices or UUIDs; CUDA stops at the first entry it cannot parse.
  const std::string v = visible;
  int at = 0;
  for (size_t first = 0; first <= v.size(); ++at) {
    const size_t end = std::min(v.find(',', first), v.size());
    std::string item = v.substr(first, end - first);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    if (item.empty()) return std::nullopt;
    if (at == cuda_index) {
      if (item.rfind("GPU-", 0) == 0) return NvmlTarget{std::nullopt, item};
      char* last = nullptr;
      const unsigned long n = std::strtoul(item.c_str(), &last, 10);
      if (*last != '\0' || item[0] == '-') return std::nullopt;  // MIG-... and the like
      return NvmlTarget{static_cast<unsigned>(n), {}};
    }
    first = end + 1;
  }
  return std::nullopt;
}

std::string nvml_library_path() {
  const char* env = std::getenv("INFERD_NVML_LIBRARY");
  return env && *env ? env : "libnvidia-ml.so.1";
}

std::unique_ptr<Nvml> Nvml::open(const std::string& library, std::string& error) {
  void* lib = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = ::dlerror();
    error = fmt::format("cannot load {}: {}", library, e ? e : "unknown error");
    return nullptr;
  }
  std::unique_ptr<Nvml> n(new Nvml());
  n->api_ = std::make_unique<Api>();
  Api& a = *n->api_;
  a.lib = lib;
  std::string missing;
  auto sym = [&](auto& fn, const char* name, const char* older = nullptr) {
    void* p = ::dlsym(lib, name);
    if (!p && older) p = ::dlsym(lib, older);
    if (!p) missing.append(missing.empty() ? "" : ", ").append(name);
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
  };
  sym(a.init, "nvmlInit_v2", "nvmlInit");
  sym(a.shutdown, "nvmlShutdown");
  sym(a.error_string, "nvmlErrorString");
  sym(a.by_index, "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex");
  sym(a.memory, "nvmlDeviceGetMemoryInfo");
  if (!missing.empty()) {
    error = fmt::format("{} lacks {}", library, missing);
    ::dlclose(lib);
    a.lib = nullptr;
    return nullptr;
  }
  // Optional: what is absent is not read (older drivers name the clock reasons "throttle reasons").
  std::string optional_missing;
  std::swap(missing, optional_missing);
  sym(a.by_uuid, "nvmlDeviceGetHandleByUUID");
  sym(a.temperature, "nvmlDeviceGetTemperature");
  sym(a.ecc, "nvmlDeviceGetTotalEccErrors");
  sym(a.clock_reasons, "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons");
  sym(a.set_create, "nvmlEventSetCreate");
  sym(a.set_free, "nvmlEventSetFree");
  sym(a.register_events, "nvmlDeviceRegisterEvents");
  sym(a.set_wait, "nvmlEventSetWait_v2", "nvmlEventSetWait");
  if (const nvmlReturn_t r = a.init(); r != NVML_SUCCESS) {
    error = fmt::format("nvmlInit: {}", a.text(r));
    ::dlclose(lib);
    a.lib = nullptr;
    return nullptr;
  }
  if (a.set_create && a.register_events && a.set_wait && a.set_create(&a.events) != NVML_SUCCESS) a.events = nullptr;
  return n;
}

Nvml::~Nvml() {
  if (!api_ || !api_->lib) return;
  if (api_->events && api_->set_free) api_->set_free(api_->events);
  api_->shutdown();
  ::dlclose(api_->lib);
}

bool Nvml::watch(int gpu, const NvmlTarget& target, std::string& error, std::string& warning) {
  Api& a = *api_;
  nvmlDevice_t dev = nullptr;
  nvmlReturn_t r;
  if (target.index) {
    r = a.by_index(*target.index, &dev);
  } else if (a.by_uuid) {
    r = a.by_uuid(target.uuid.c_str(), &dev);
  } else {
    error = "this NVML cannot find a GPU by UUID (" + target.uuid + ")";
    return false;
  }
  if (r != NVML_SUCCESS) {
    error = fmt::format("NVML device {}: {}", target.index ? std::to_string(*target.index) : target.uuid, a.text(r));
    return false;
  }
  a.devices[gpu] = dev;
  if (!a.events) {
    warning = "no Xid events: this NVML has no event set";
  } else if (const nvmlReturn_t e = a.register_events(dev, nvmlEventTypeXidCriticalError, a.events);
             e != NVML_SUCCESS) {
    warning = "no Xid events: " + a.text(e);
  }
  return true;
}

void Nvml::drain_events() {
  Api& a = *api_;
  if (!a.events) return;
  for (unsigned i = 0; i < kMaxEventsPerRead; ++i) {
    nvmlEventData_t e{};
    if (a.set_wait(a.events, &e, 0) != NVML_SUCCESS) return;  // NVML_ERROR_TIMEOUT: none waiting
    if (!(e.eventType & nvmlEventTypeXidCriticalError)) continue;
    for (const auto& [gpu, dev] : a.devices)
      if (dev == e.device) a.xids[gpu].push_back(e.eventData);
  }
}

GpuReading Nvml::read(int gpu) {
  Api& a = *api_;
  GpuReading out;
  out.gpu = gpu;
  drain_events();
  if (auto it = a.xids.find(gpu); it != a.xids.end()) {
    out.xids = std::move(it->second);
    a.xids.erase(it);
  }
  const auto dev_it = a.devices.find(gpu);
  if (dev_it == a.devices.end()) {
    out.error = "not watched";
    return out;
  }
  nvmlDevice_t dev = dev_it->second;
  nvmlMemory_t mem{};
  if (const nvmlReturn_t r = a.memory(dev, &mem); r != NVML_SUCCESS) {
    out.lost = r == NVML_ERROR_GPU_IS_LOST;
    out.error = a.text(r);
    return out;
  }
  out.readable = true;
  out.memory_used = mem.used;
  out.memory_total = mem.total;
  unsigned t = 0;
  if (a.temperature && a.temperature(dev, NVML_TEMPERATURE_GPU, &t) == NVML_SUCCESS) out.temperature_c = t;
  unsigned long long n = 0;
  if (a.ecc && a.ecc(dev, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC, &n) == NVML_SUCCESS) out.ecc_corrected = n;
  if (a.ecc && a.ecc(dev, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &n) == NVML_SUCCESS)
    out.ecc_uncorrected = n;
  unsigned long long reasons = 0;
  if (a.clock_reasons && a.clock_reasons(dev, &reasons) == NVML_SUCCESS) out.clock_reasons = reasons;
  return out;
}

}  // namespace inferd::health
