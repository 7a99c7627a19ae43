#include "health/process_monitor.hpp"

#include <utility>

#include <spdlog/spdlog.h>

namespace inferd::health {

namespace {
std::string mib(uint64_t bytes) { return fmt::format("{:.0f} MiB", static_cast<double>(bytes) / (1 << 20)); }
}  // namespace

ProcessMonitor::ProcessMonitor(ProcessOptions options, Procfs procfs)
    : options_(options), procfs_(std::move(procfs)) {}

std::optional<uint64_t> ProcessMonitor::baseline_rss() const {
  const uint64_t b = baseline_.load();
  return b ? std::optional<uint64_t>(b) : std::nullopt;
}

ProcessObservation ProcessMonitor::sample() {
  ProcessObservation obs;
  obs.signal.monitor = "process";
  obs.baseline_rss = baseline_rss();
  obs.open_fds = procfs_.count_entries("self/fd");
  const auto status = procfs_.read("self/status");
  const auto rss = status ? colon_field(*status, "VmRSS") : std::nullopt;
  const auto threads = status ? colon_field(*status, "Threads") : std::nullopt;
  if (!rss || !threads) {
    obs.signal.reason = "VmRSS/Threads unavailable (" + procfs_.path("self/status").string() + ")";
    if (!reported_unavailable_.exchange(true)) spdlog::warn("process: {}", obs.signal.reason);
    return obs;
  }
  reported_unavailable_ = false;
  obs.available = true;
  obs.rss_bytes = *rss;
  obs.threads = *threads;
  obs.signal.reason = fmt::format("RSS {}, {} threads", mib(obs.rss_bytes), obs.threads);
  if (const uint64_t base = obs.baseline_rss.value_or(0); base > 0 && obs.rss_bytes > base) {
    const uint64_t growth = obs.rss_bytes - base;
    if (growth >= options_.rss_growth_min_bytes &&
        static_cast<double>(growth) >= options_.rss_growth_warn * static_cast<double>(base)) {
      obs.signal.level = Level::Warn;
      obs.signal.reason = fmt::format("RSS {} grew {} over the baseline {}", mib(obs.rss_bytes), mib(growth),
                                      mib(base));
    }
  }
  return obs;
}

bool ProcessMonitor::capture_baseline() {
  const ProcessObservation obs = sample();
  if (!obs.available || obs.rss_bytes == 0) return false;
  baseline_ = obs.rss_bytes;
  return true;
}

}  // namespace inferd::health
