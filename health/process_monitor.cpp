#include "health/process_monitor.hpp"

#include <utility>

#include <spdlog/spdlog.h>

namespace inferd::health {

namespace {
std::string mib(uint64_t bytes) { return fmt::format("{:.0f} MiB", static_cast<double>(bytes) / (1 << 20)); }
}  // namespace

ProcessMonitor::ProcessMonitor(ProcessOptions options, Procfs procfs)
    : options_(options), procfs_(std::move(procfs)) {}

ProcessObservation ProcessMonitor::sample() {
  ProcessObservation obs;
  obs.signal.monitor = "process";
  obs.baseline_rss = baseline_;
  obs.open_fds = procfs_.count_entries("self/fd");
  const auto status = procfs_.read("self/status");
  const auto rss = status ? colon_field(*status, "VmRSS") : std::nullopt;
  const auto threads = status ? colon_field(*status, "Threads") : std::nullopt;
  if (!rss || !threads) {
    obs.signal.reason = "VmRSS/Threads unavailable (" + procfs_.path("self/status").string() + ")";
    if (!reported_unavailable_) spdlog::warn("process: {}", obs.signal.reason);
    reported_unavailable_ = true;
    return obs;
  }
  reported_unavailable_ = false;
  obs.available = true;
  obs.rss_bytes = *rss;
  obs.threads = *threads;
  obs.signal.reason = fmt::format("RSS {}, {} threads", mib(obs.rss_bytes), obs.threads);
  if (baseline_ && obs.rss_bytes > *baseline_) {
    const uint64_t growth = obs.rss_bytes - *baseline_;
    if (growth >= options_.rss_growth_min_bytes &&
        static_cast<double>(growth) >= options_.rss_growth_warn * static_cast<double>(*baseline_)) {
      obs.signal.level = Level::Warn;
      obs.signal.reason = fmt::format("RSS {} grew {} over the baseline {}", mib(obs.rss_bytes), mib(growth),
                                      mib(*baseline_));
    }
  }
  return obs;
}

bool ProcessMonitor::capture_baseline() {
  const ProcessObservation obs = sample();
  if (!obs.available) return false;
  baseline_ = obs.rss_bytes;
  return true;
}

}  // namespace inferd::health
