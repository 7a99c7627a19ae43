// [health] as the monitors, the generation probe and the recovery policy take it:
// one translation, so the sampling code sees settings, not configuration keys.
#pragma once
#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/config.hpp"
#include "health/generation_probe.hpp"
#include "health/gpu_monitor.hpp"
#include "health/log_scanner.hpp"
#include "health/meminfo_monitor.hpp"
#include "health/policy.hpp"
#include "health/process_monitor.hpp"
#include "health/psi_monitor.hpp"
#include "health/step_deadline.hpp"

namespace inferd::daemon {

// How often each monitor is sampled; the supervisor ticks at the shortest.
struct MonitorIntervals {
  std::chrono::milliseconds psi, meminfo, process, log, step_deadline, gpu;
  std::chrono::milliseconds tick;
};

struct MonitorSettings {
  health::LogScannerOptions scanner;
  health::PsiOptions psi;
  health::MeminfoOptions meminfo;
  health::ProcessOptions process;
  health::StepDeadlineOptions step_deadline;
  health::ProbeOptions probe;
  health::PolicyOptions policy;
  MonitorIntervals every;
};

// Throws ConfigError for a log_patterns line parse_log_patterns refuses.
MonitorSettings monitor_settings(const HealthConfig& h);

// The "category level regex" lines of [health] log_patterns (blank lines
// skipped), each regex compiled once to check it. Throws std::invalid_argument
// naming the line (counted from 1 within the value) and what is wrong with it.
std::vector<health::LogPattern> parse_log_patterns(const std::string& text);

// The CUDA index of "cuda" (0) or "cuda:N"; nullopt for any other device.
std::optional<int> cuda_device_index(std::string_view device);
// The gpu monitor's GPUs: [health] gpu_devices, else the engine's own CUDA
// device, else none; the library from $INFERD_NVML_LIBRARY.
health::GpuMonitorOptions gpu_monitor_options(const Config& cfg);

}  // namespace inferd::daemon
