#include "daemon/fabric_preflight.hpp"

#include <stdexcept>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "fabric/env.hpp"
#include "fabric/preflight.hpp"
#include "fabric/report.hpp"

namespace inferd::daemon {

void fabric_preflight(const Config& cfg) {
  const fabric::Request request{cfg.parallel.master_addr, cfg.fabric.interface, fabric::process_env(), {}};
  fabric::Preflight p;
  try {
    p = fabric::run_preflight(cfg.fabric.sysfs_root, request);
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format("fabric pre-flight: {}", e.what()));
  }
  // A device libibverbs cannot open or query is one NCCL cannot use either.
  if (!p.verbs.error.empty()) spdlog::warn("fabric: {}", fabric::verbs_line(p));
  else if (const std::string v = fabric::verbs_line(p); !v.empty() && !p.table.ports.empty()) spdlog::info("fabric: {}", v);
  const fabric::Decision& d = p.decision;
  if (!d.skipped.empty()) {
    spdlog::info("fabric: {}", d.skipped);
    if (!d.socket) return;
    spdlog::info("fabric: {}", fabric::socket_line(*d.socket));
    // Without RDMA a wrong socket interface is the operator's to own: it is
    // said, not refused (the collectives over TCP may still find their way).
    for (const fabric::EnvCheck& e : d.env)
      if (!e.problem.empty()) spdlog::warn("fabric: {}", e.problem);
  } else {
    if (!d.ok()) throw std::runtime_error("fabric pre-flight refused: " + d.refusal);
    spdlog::info("fabric: {}", fabric::summary_line(d));
  }
  for (const std::string& set : fabric::export_env(d.env)) spdlog::info("fabric: exported {}", set);
  for (const fabric::EnvCheck& e : d.env)
    if (e.operator_value && e.problem.empty()) spdlog::info("fabric: {}={} set by the operator agrees", e.name, *e.operator_value);
}

cluster::FabricChoice fabric_identity(const Config& cfg) {
  if (cfg.parallel.nnodes <= 1) return {};
  try {
    const fabric::Preflight p = fabric::run_preflight(
        cfg.fabric.sysfs_root, {cfg.parallel.master_addr, cfg.fabric.interface, fabric::process_env(), {}});
    if (const auto& s = p.decision.socket) {
      cluster::FabricChoice c;
      c.interface = s->interface;
      c.address = s->address;
      return c;
    }
    const auto& c = p.decision.choice;
    if (!c || !p.decision.ok()) return {};
    for (const fabric::Port& port : p.table.ports) {
      if (port.device != c->device || port.port != c->port) continue;
      int mtu = port.active_mtu.value_or(0);
      if (mtu == 0)
        if (auto it = p.table.interfaces.find(c->interface); it != p.table.interfaces.end()) mtu = it->second.mtu;
      return {c->interface, c->device, c->port, c->gid_index, mtu, port.link_layer, c->address};
    }
  } catch (const std::exception&) {
    // The pre-flight already failed start-up for an unreadable root.
  }
  return {};
}

}  // namespace inferd::daemon
