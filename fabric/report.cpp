#include "fabric/report.hpp"

#include <fmt/format.h>

#include "fabric/port_monitor.hpp"

namespace inferd::fabric {

std::string format_table(const FabricTable& t) {
  std::string out;
  for (const Port& p : t.ports) {
    out += fmt::format("{} port {}: {} ({}), {}, {}, active MTU {}\n", p.device, p.port,
                       p.state.empty() ? "state unknown" : p.state, p.phys_state.empty() ? "?" : p.phys_state,
                       p.link_layer.empty() ? "link layer unknown" : p.link_layer, p.rate.empty() ? "rate unknown" : p.rate,
                       p.active_mtu ? std::to_string(*p.active_mtu) : std::string("unknown"));
    std::string errors;
    for (const std::string& name : error_counter_names()) {
      for (const auto* counters : {&p.counters, &p.hw_counters}) {
        auto it = counters->find(name);
        if (it != counters->end() && it->second > 0) errors += fmt::format("{}{}={}", errors.empty() ? "" : ", ", name, it->second);
      }
    }
    if (!errors.empty()) out += "  error counters: " + errors + "\n";
    for (const GidEntry& g : p.gids)
      out += fmt::format("  gid {:>3}  {:<12} {:<40} {}\n", g.index, g.type.empty() ? "?" : g.type,
                         gid_address(g.gid), g.ndev.empty() ? "-" : g.ndev);
  }
  for (const auto& [name, ni] : t.interfaces)
    out += fmt::format("interface {}: MTU {}, {}\n", name, ni.mtu, ni.operstate.empty() ? "state unknown" : ni.operstate);
  return out;
}

std::string socket_line(const SocketChoice& s) {
  return fmt::format("socket interface {} ({}/{}{})", s.interface, s.address, s.prefix_len,
                     s.configured ? ", as configured" : ", on the master's subnet");
}

namespace {

std::string env_lines(const std::vector<EnvCheck>& env) {
  std::string out;
  for (const EnvCheck& e : env) {
    if (!e.operator_value) out += fmt::format("  {}={} (unset: inferd exports it)\n", e.name, e.value);
    else if (e.problem.empty()) out += fmt::format("  {}={} (set by the operator; agrees)\n", e.name, *e.operator_value);
    else out += fmt::format("  {}={} (set by the operator; WRONG, the fabric says {})\n", e.name, *e.operator_value, e.value);
  }
  return out;
}

}  // namespace

std::string summary_line(const Decision& d) {
  if (!d.skipped.empty()) return d.socket ? d.skipped + "; " + socket_line(*d.socket) : d.skipped;
  std::string line;
  if (d.choice) {
    const Choice& c = *d.choice;
    line = fmt::format("interface {}, {} port {}, RoCE v2 GID index {} ({})", c.interface, c.device, c.port,
                       c.gid_index, c.address);
  }
  if (!d.refusal.empty()) line = "refused: " + d.refusal;
  return line;
}

std::string format_decision(const Decision& d, const Request& request) {
  if (!d.skipped.empty()) {
    if (!d.socket) return d.skipped + "\n";
    return d.skipped + "\n" + socket_line(*d.socket) + "\n" + env_lines(d.env);
  }
  std::string out;
  if (d.choice) {
    const Choice& c = *d.choice;
    out += fmt::format("choice: interface {}, device {} port {}, RoCE v2 GID index {} ({}", c.interface, c.device,
                       c.port, c.gid_index, c.address);
    if (!request.interface.empty()) out += fmt::format(", on interface {} as configured)\n", request.interface);
    else out += fmt::format(", {} leading bits shared with master {})\n", c.common_prefix_bits, request.master_addr);
    out += env_lines(d.env);
  }
  if (!d.refusal.empty()) out += "refused: " + d.refusal + "\n";
  return out;
}

}  // namespace inferd::fabric
