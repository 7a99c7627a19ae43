#include "health/meminfo_monitor.hpp"

#include <algorithm>
#include <utility>

#include <spdlog/spdlog.h>

namespace inferd::health {

namespace {
std::string gib(uint64_t bytes) { return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / (1ull << 30)); }
}  // namespace

uint64_t MemFloor::resolve(uint64_t mem_total) const {
  const uint64_t share = fraction > 0 ? static_cast<uint64_t>(fraction * static_cast<double>(mem_total)) : 0;
  if (bytes == 0) return share;
  if (fraction <= 0) return bytes;
  return std::min(bytes, share);
}

MeminfoMonitor::MeminfoMonitor(MeminfoOptions options, Procfs procfs)
    : options_(options), procfs_(std::move(procfs)) {}

std::optional<uint64_t> MeminfoMonitor::baseline() const {
  const uint64_t b = baseline_.load();
  return b ? std::optional<uint64_t>(b) : std::nullopt;
}

MeminfoObservation MeminfoMonitor::sample() {
  MeminfoObservation obs;
  obs.signal.monitor = "meminfo";
  obs.baseline = baseline();
  const auto text = procfs_.read("meminfo");
  const auto total = text ? colon_field(*text, "MemTotal") : std::nullopt;
  const auto avail = text ? colon_field(*text, "MemAvailable") : std::nullopt;
  if (!total || !avail || *total == 0) {
    obs.signal.reason = "MemTotal/MemAvailable unavailable (" + procfs_.path("meminfo").string() + ")";
    if (!reported_unavailable_.exchange(true)) spdlog::warn("meminfo: {}", obs.signal.reason);
    return obs;
  }
  reported_unavailable_ = false;
  obs.available = true;
  obs.mem_total = *total;
  obs.mem_available = *avail;
  obs.swap_total = colon_field(*text, "SwapTotal").value_or(0);
  obs.swap_free = colon_field(*text, "SwapFree").value_or(0);
  obs.warn_floor = options_.warn.resolve(obs.mem_total);
  obs.shed_floor = options_.shed.resolve(obs.mem_total);
  obs.critical_floor = options_.critical.resolve(obs.mem_total);

  Signal& s = obs.signal;
  s.reason = "MemAvailable " + gib(obs.mem_available);
  const std::pair<Level, uint64_t> floors[] = {
      {Level::Critical, obs.critical_floor}, {Level::Shed, obs.shed_floor}, {Level::Warn, obs.warn_floor}};
  for (const auto& [level, floor] : floors) {
    if (obs.mem_available < floor) {
      s.level = level;
      s.reason =
          fmt::format("MemAvailable {} below the {} floor {}", gib(obs.mem_available), level_name(level), gib(floor));
      break;
    }
  }
  if (const uint64_t base = obs.baseline.value_or(0); base > 0 && obs.mem_available < base) {
    const double drop = static_cast<double>(base - obs.mem_available) / static_cast<double>(base);
    const Level level = options_.relative_shed > 0 && drop >= options_.relative_shed   ? Level::Shed
                        : options_.relative_warn > 0 && drop >= options_.relative_warn ? Level::Warn
                                                                                       : Level::Ok;
    if (level > s.level) {
      s.level = level;
      s.reason = fmt::format("MemAvailable {} is {:.0f}% below the baseline {}", gib(obs.mem_available), drop * 100,
                             gib(base));
    }
  }
  return obs;
}

bool MeminfoMonitor::capture_baseline() {
  const MeminfoObservation obs = sample();
  if (!obs.available || obs.mem_available == 0) return false;
  baseline_ = obs.mem_available;
  return true;
}

bool MeminfoMonitor::has_reserve(uint64_t bytes) {
  const MeminfoObservation obs = sample();
  if (!obs.available) return true;
  return obs.mem_available >= bytes && obs.mem_available - bytes >= obs.shed_floor;
}

}  // namespace inferd::health
