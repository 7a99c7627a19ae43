#include "fabric/preflight.hpp"

#include <filesystem>

#include <fmt/format.h>

#include "fabric/sysfs.hpp"

namespace inferd::fabric {

Preflight run_preflight(const std::string& sysfs_root, const Request& request) {
  Preflight p;
  p.table = read_sysfs(sysfs_root);
  std::error_code ec;
  // libibverbs reads the live /sys and opens /dev/infiniband: it says nothing
  // about a recorded tree.
  p.live = std::filesystem::equivalent(sysfs_root, "/sys", ec);
  if (p.live) {
    p.verbs = probe_verbs();
    merge_verbs(p.table, p.verbs);
  }
  // The interfaces of the network namespace this process runs in: the node's
  // own names, whatever tree stands in for its /sys.
  Request r = request;
  if (r.kernel_addresses.empty()) r.kernel_addresses = kernel_ipv4_addresses();
  p.decision = decide(p.table, r);
  return p;
}

std::string verbs_line(const Preflight& p) {
  if (!p.live) return {};
  if (!p.verbs.built) return "libibverbs: not in this build (meson -Drdma=enabled); the table is sysfs alone";
  if (!p.verbs.error.empty()) return "libibverbs: " + p.verbs.error;
  if (p.verbs.ports.empty()) return "libibverbs: no RDMA devices listed";
  return fmt::format("libibverbs: {} port(s) queried", p.verbs.ports.size());
}

}  // namespace inferd::fabric
