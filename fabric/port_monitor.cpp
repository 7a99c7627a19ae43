#include "fabric/port_monitor.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <tuple>

#include <fmt/format.h>

#include "fabric/sysfs.hpp"

namespace inferd::fabric {

namespace fs = std::filesystem;

const std::vector<std::string>& error_counter_names() {
  static const std::vector<std::string> names = {
      // ports/<n>/counters (IB and RoCE)
      "symbol_error", "link_downed", "link_error_recovery", "port_rcv_errors", "port_rcv_remote_physical_errors",
      "port_rcv_switch_relay_errors", "port_xmit_discards", "port_xmit_constraint_errors",
      "port_rcv_constraint_errors", "local_link_integrity_errors", "excessive_buffer_overrun_errors", "VL15_dropped",
      // ports/<n>/hw_counters (mlx5)
      "out_of_sequence", "packet_seq_err", "local_ack_timeout_err", "rnr_nak_retry_err", "implied_nak_seq_err",
      "duplicate_request", "req_cqe_error", "resp_cqe_error", "req_remote_access_errors",
      "resp_remote_access_errors"};
  return names;
}

namespace {

std::optional<std::string> first_line(const fs::path& p) {
  std::ifstream in(p);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  return line;
}

void read_errors(const fs::path& dir, std::map<std::string, uint64_t>& out) {
  for (const std::string& name : error_counter_names()) {
    const auto text = first_line(dir / name);
    if (!text) continue;
    try {
      size_t used = 0;
      const uint64_t n = std::stoull(*text, &used);
      if (used > 0) out[name] = n;
    } catch (const std::exception&) {
    }
  }
}

const PortReading* find(const std::vector<PortReading>& v, const PortReading& p) {
  for (const PortReading& r : v)
    if (r.device == p.device && r.port == p.port) return &r;
  return nullptr;
}

}  // namespace

std::vector<PortReading> read_ports(const std::string& root) {
  std::vector<PortReading> out;
  std::error_code ec;
  const fs::path ib = fs::path(root) / "class" / "infiniband";
  for (fs::directory_iterator dev(ib, ec), end; !ec && dev != end; dev.increment(ec)) {
    std::error_code pec;
    for (fs::directory_iterator port(dev->path() / "ports", pec); !pec && port != end; port.increment(pec)) {
      PortReading r;
      r.device = dev->path().filename().string();
      try {
        r.port = std::stoi(port->path().filename().string());
      } catch (const std::exception&) {
        continue;
      }
      const auto [code, state] = parse_numbered(first_line(port->path() / "state").value_or(""));
      r.active = code == 4;
      r.state = state;
      read_errors(port->path() / "counters", r.errors);
      read_errors(port->path() / "hw_counters", r.errors);
      out.push_back(std::move(r));
    }
  }
  std::sort(out.begin(), out.end(),
            [](const PortReading& a, const PortReading& b) { return std::tie(a.device, a.port) < std::tie(b.device, b.port); });
  return out;
}

PortObservation assess(const std::vector<PortReading>& baseline, const std::vector<PortReading>& previous,
                       std::vector<PortReading> now, double seconds, const PortThresholds& t, const ChosenPort& chosen) {
  PortObservation o;
  o.signal.monitor = "fabric";
  o.ports = std::move(now);
  o.baselined = !baseline.empty();
  std::vector<std::string> critical, warn, rates;
  for (const PortReading& b : baseline) {
    const PortReading* p = find(o.ports, b);
    const std::string name = fmt::format("{} port {}", b.device, b.port);
    // Only the chosen port carries the group; the others going down are news, not an outage.
    const bool carries = chosen.device.empty() || (chosen.device == b.device && chosen.port == b.port);
    auto& down = carries ? critical : warn;
    if (p == nullptr) {
      if (b.active) down.push_back(name + " is gone");
      continue;
    }
    if (b.active && !p->active) down.push_back(fmt::format("{} went {}", name, p->state.empty() ? "down" : p->state));
    const PortReading* before_p = seconds > 0 ? find(previous, b) : nullptr;
    for (const auto& [counter, at_baseline] : b.errors) {
      auto it = p->errors.find(counter);
      // A counter that went backwards was reset (driver reload): no increase.
      auto grown = [&](uint64_t from) { return it == p->errors.end() || it->second < from ? 0 : it->second - from; };
      CounterDelta delta{b.device, b.port, counter, grown(at_baseline), 0};
      if (before_p != nullptr)
        if (auto pit = before_p->errors.find(counter); pit != before_p->errors.end())
          delta.per_second = static_cast<double>(grown(pit->second)) / seconds;
      const double limit = counter == "link_downed" ? t.link_downed_per_s : t.errors_per_s;
      if (limit > 0 && delta.per_second > 0 && delta.per_second >= limit)
        rates.push_back(fmt::format("{} {} {:.3g}/s", name, counter, delta.per_second));
      o.deltas.push_back(std::move(delta));
    }
  }
  auto join = [](const std::vector<std::string>& v, const char* sep = ", ") {
    std::string s;
    for (const std::string& x : v) s += (s.empty() ? "" : sep) + x;
    return s;
  };
  std::vector<std::string> parts;
  if (!critical.empty()) parts.push_back(join(critical));
  if (!warn.empty()) parts.push_back(join(warn));
  if (!rates.empty()) parts.push_back(fmt::format("error rates over the last {:.3g} s: {}", seconds, join(rates)));
  if (!critical.empty()) o.signal.level = health::Level::Critical;
  else if (!parts.empty()) o.signal.level = health::Level::Warn;
  o.signal.reason = join(parts, "; ");
  return o;
}

PortMonitor::PortMonitor(std::string sysfs_root, PortThresholds thresholds, ChosenPort chosen)
    : root_(std::move(sysfs_root)), thresholds_(thresholds), chosen_(std::move(chosen)) {}

PortObservation PortMonitor::sample() {
  auto now = read_ports(root_);
  const auto at = std::chrono::steady_clock::now();
  std::lock_guard lk(mu_);
  const double seconds = previous_.empty() ? 0 : std::chrono::duration<double>(at - previous_at_).count();
  PortObservation o = assess(baseline_, previous_, now, seconds, thresholds_, chosen_);
  previous_ = std::move(now);
  previous_at_ = at;
  return o;
}

void PortMonitor::capture_baseline() {
  auto now = read_ports(root_);
  std::lock_guard lk(mu_);
  baseline_ = std::move(now);
}

}  // namespace inferd::fabric
