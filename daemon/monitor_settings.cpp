#include "daemon/monitor_settings.hpp"

#include <charconv>
#include <cstdlib>

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <string>

namespace inferd::daemon {

namespace {

using namespace std::chrono;

health::Level parse_level(const std::string& s) {
  if (s == "warn") return health::Level::Warn;
  if (s == "shed") return health::Level::Shed;
  if (s == "critical") return health::Level::Critical;
  throw std::invalid_argument("level must be warn, shed or critical, got '" + s + "'");
}

// The defaults plus the [health] log_patterns lines.
health::LogScannerOptions scanner_options(const HealthConfig& h) {
  health::LogScannerOptions o;
  try {
    for (auto& p : parse_log_patterns(h.log_patterns)) o.patterns.push_back(std::move(p));
  } catch (const std::invalid_argument& e) {
    throw ConfigError(std::string("[health] log_patterns: ") + e.what());
  }
  return o;
}

health::MeminfoOptions meminfo_options(const HealthConfig& h) {
  health::MeminfoOptions o;
  o.warn = {static_cast<uint64_t>(h.mem_warn_bytes), h.mem_warn_fraction};
  o.shed = {static_cast<uint64_t>(h.mem_shed_bytes), h.mem_shed_fraction};
  o.critical = {static_cast<uint64_t>(h.mem_critical_bytes), h.mem_critical_fraction};
  return o;
}

health::PsiOptions psi_options(const HealthConfig& h) {
  auto t = [](const std::array<double, 3>& a) { return health::PsiThresholds{a[0], a[1], a[2]}; };
  return {t(h.psi_some_avg10), t(h.psi_full_avg10), t(h.psi_some_avg60), t(h.psi_full_avg60)};
}

MonitorIntervals intervals(const HealthConfig& h) {
  auto every = [&](int ms) { return milliseconds(ms > 0 ? ms : h.interval_ms); };
  MonitorIntervals e{every(h.psi_interval_ms), every(h.meminfo_interval_ms), every(h.process_interval_ms),
                     every(h.log_interval_ms), every(h.step_deadline_interval_ms), every(h.gpu_interval_ms), {}};
  e.tick = std::min({milliseconds(h.interval_ms), e.psi, e.meminfo, e.process, e.log, e.step_deadline, e.gpu});
  return e;
}

}  // namespace

std::vector<health::LogPattern> parse_log_patterns(const std::string& text) {
  std::vector<health::LogPattern> out;
  std::istringstream lines(text);
  std::string line;
  for (int n = 1; std::getline(lines, line); ++n) {
    std::istringstream words(line);
    std::string category, level, regex;
    if (!(words >> category)) continue;
    const std::string where = "line " + std::to_string(n) + " '" + line + "': ";
    if (!(words >> level) || !std::getline(words >> std::ws, regex) || regex.empty())
      throw std::invalid_argument(where + "each line is 'category level regex'");
    try {
      out.push_back({category, regex, parse_level(level)});
      health::LogScanner check({.patterns = {out.back()}});  // compiles the regex, as the scanner will
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(where + e.what());
    }
  }
  return out;
}

MonitorSettings monitor_settings(const HealthConfig& h) {
  return {.scanner = scanner_options(h),
          .psi = psi_options(h),
          .meminfo = meminfo_options(h),
          .process = {.rss_growth_warn = h.rss_growth_warn},
          .step_deadline = {.floor = duration_cast<nanoseconds>(duration<double>(h.step_deadline_floor_s)),
                   .p99_factor = h.step_deadline_p99_factor},
          .probe = {.budget = milliseconds(h.probe_budget_ms)},
          .policy = {.calm_samples_to_unshed = h.calm_samples_to_unshed,
                     .max_recoveries = h.max_recoveries,
                     .recovery_window = seconds(h.recovery_window_s)},
          .every = intervals(h)};
}

std::optional<int> cuda_device_index(std::string_view device) {
  if (device == "cuda") return 0;
  if (device.substr(0, 5) != "cuda:") return std::nullopt;
  int n = -1;
  const auto* last = device.data() + device.size();
  auto [p, ec] = std::from_chars(device.data() + 5, last, n);
  return ec == std::errc() && p == last && n >= 0 ? std::optional<int>(n) : std::nullopt;
}

health::GpuMonitorOptions gpu_monitor_options(const Config& cfg) {
  health::GpuMonitorOptions o;
  o.library = health::nvml_library_path();
  o.cuda_visible_devices = std::getenv("CUDA_VISIBLE_DEVICES");
  const auto engine_gpu = cuda_device_index(cfg.engine.device);
  o.engine_on_cuda = engine_gpu.has_value();
  if (!cfg.health.gpu_devices.empty()) o.gpus = cfg.health.gpu_devices;
  else if (engine_gpu) o.gpus = {*engine_gpu};
  return o;
}

}  // namespace inferd::daemon
