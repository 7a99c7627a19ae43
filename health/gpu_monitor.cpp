#include "health/gpu_monitor.hpp"

#include <algorithm>
#include <utility>

#include <spdlog/spdlog.h>

namespace inferd::health {

bool xid_is_critical(uint64_t xid) {
  switch (xid) {
    case 48: case 63: case 64: case 79: case 94: case 95: return true;
    default: return false;
  }
}

std::string xid_text(uint64_t xid) {
  switch (xid) {
    case 48: return "Xid 48 (double-bit ECC error)";
    case 63: return "Xid 63 (ECC page retirement or row remapping recorded)";
    case 64: return "Xid 64 (ECC page retirement or row remapping failed)";
    case 79: return "Xid 79 (GPU has fallen off the bus)";
    case 94: return "Xid 94 (contained ECC error)";
    case 95: return "Xid 95 (uncontained ECC error)";
    default: return "Xid " + std::to_string(xid);
  }
}

Signal assess_gpu(const GpuReading& now, std::optional<uint64_t> uncorrected_baseline,
                  const std::vector<uint64_t>& xids) {
  Signal s;
  s.monitor = "gpu";
  const std::string name = "gpu" + std::to_string(now.gpu);
  std::vector<std::string> critical, warn;
  for (uint64_t x : xids) {
    std::string t = xid_text(x);
    auto& into = xid_is_critical(x) ? critical : warn;
    if (std::find(into.begin(), into.end(), t) == into.end()) into.push_back(std::move(t));
  }
  if (now.lost) critical.push_back("lost (" + now.error + ")");
  else if (!now.readable) warn.push_back("unreadable (" + now.error + ")");
  if (now.ecc_uncorrected && uncorrected_baseline && *now.ecc_uncorrected > *uncorrected_baseline)
    critical.push_back(std::to_string(*now.ecc_uncorrected - *uncorrected_baseline) +
                       " uncorrected ECC error(s) since the baseline");
  if (now.clock_reasons) {
    if (const uint64_t slow = *now.clock_reasons & (clock_reason::kThermal | clock_reason::kPower))
      warn.push_back("clocks slowed: " + clock_reasons_text(slow));
  }
  auto join = [](const std::vector<std::string>& v) {
    std::string out;
    for (const auto& x : v) out.append(out.empty() ? "" : ", ").append(x);
    return out;
  };
  if (!critical.empty()) {
    s.level = Level::Critical;
    s.reason = name + ": " + join(critical);
  } else if (!warn.empty()) {
    s.level = Level::Warn;
    s.reason = name + ": " + join(warn);
  } else {
    s.reason = fmt::format("{}: {} of {} MiB used", name, now.memory_used >> 20, now.memory_total >> 20);
    if (now.temperature_c) s.reason += fmt::format(", {} C", *now.temperature_c);
  }
  return s;
}

GpuMonitor::GpuMonitor(GpuMonitorOptions options) : opts_(std::move(options)) {}

GpuMonitor::~GpuMonitor() = default;

// On the first sample, so a daemon that watches no GPU never loads NVML.
void GpuMonitor::start() {
  started_ = true;
  if (opts_.gpus.empty()) {
    inactive_ = "no GPU to watch";
    return;
  }
  std::string error;
  nvml_ = Nvml::open(opts_.library, error);
  if (!nvml_) {
    inactive_ = "inactive: NVML not loaded: " + error;
    if (opts_.engine_on_cuda) spdlog::warn("gpu monitor: {}; the GPU's health is not watched", inactive_);
    else spdlog::info("gpu monitor: {}", inactive_);
    return;
  }
  for (int gpu : opts_.gpus) {
    const auto target = nvml_target(gpu, opts_.cuda_visible_devices);
    std::string why, warning;
    if (!target) {
      spdlog::warn("gpu monitor: CUDA device {} is not in CUDA_VISIBLE_DEVICES={}; not watched", gpu,
                   opts_.cuda_visible_devices ? opts_.cuda_visible_devices : "");
    } else if (!nvml_->watch(gpu, *target, why, warning)) {
      spdlog::warn("gpu monitor: CUDA device {} not watched: {}", gpu, why);
    } else {
      watched_.push_back(gpu);
      spdlog::info("gpu monitor: watching CUDA device {} through {}{}", gpu, opts_.library,
                   warning.empty() ? "" : " (" + warning + ")");
    }
  }
  if (watched_.empty()) {
    inactive_ = "inactive: none of the GPUs could be found through NVML";
    nvml_.reset();
  }
}

GpuObservation GpuMonitor::sample() {
  if (!started_) start();
  GpuObservation obs;
  obs.signal.monitor = "gpu";
  if (!nvml_) {
    obs.signal.reason = inactive_;
    obs.give_signal = opts_.engine_on_cuda || !opts_.gpus.empty();
    return obs;
  }
  obs.active = obs.give_signal = true;
  const bool rebaseline = rebaseline_.exchange(false);
  for (int gpu : watched_) {
    GpuReading r = nvml_->read(gpu);
    auto& xids = xids_since_baseline_[gpu];
    auto& base = uncorrected_baseline_[gpu];
    if (rebaseline) {
      xids.clear();
      base = uncorrected_last_[gpu];
    }
    if (!r.xids.empty()) {
      std::lock_guard lk(counts_mu_);
      for (uint64_t x : r.xids) {
        ++xid_counts_[{gpu, x}];
        spdlog::error("gpu monitor: CUDA device {}: {}", gpu, xid_text(x));
      }
    }
    xids.insert(xids.end(), r.xids.begin(), r.xids.end());
    if (r.ecc_uncorrected) {
      if (!base) base = r.ecc_uncorrected;  // the first reading is the baseline: older errors are the driver's past
      uncorrected_last_[gpu] = r.ecc_uncorrected;
    }
    Signal s = assess_gpu(r, base, xids);
    if (s.level > obs.signal.level) obs.signal.reason.clear();
    if (s.level >= obs.signal.level) {
      obs.signal.level = s.level;
      obs.signal.reason += (obs.signal.reason.empty() ? "" : "; ") + s.reason;
    }
    obs.gpus.push_back(std::move(r));
  }
  return obs;
}

void GpuMonitor::rebaseline() { rebaseline_ = true; }

std::map<std::pair<int, uint64_t>, uint64_t> GpuMonitor::xid_counts() const {
  std::lock_guard lk(counts_mu_);
  return xid_counts_;
}

}  // namespace inferd::health
