// `inferctl fabric`: the RDMA fabric this node sees and the pre-flight's choice
// for a master address, from the live /sys or a recorded tree.
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/config.hpp"
#include "fabric/env.hpp"
#include "fabric/preflight.hpp"
#include "fabric/report.hpp"
#include "tools/inferctl_commands.hpp"

namespace inferd::tools {

namespace {

constexpr const char* kUsage =
    "usage: inferctl fabric [--config FILE] [--sysfs-root DIR] [--master-addr ADDR] [--interface IF]\n"
    "Prints the RDMA ports (with their non-zero error counters), their GID tables and\n"
    "interfaces read from DIR (default /sys; libibverbs is asked too when it is /sys), then\n"
    "the choice inferd's pre-flight makes for a group whose head is at ADDR (an IPv4\n"
    "address), or on interface IF: interface, device, port and RoCE v2 GID index, and the\n"
    "NCCL, Gloo and UCX variables it exports or, when they are set in this environment,\n"
    "checks. With no RDMA device: the interface whose subnet holds ADDR, from this network\n"
    "namespace's own addresses, for NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME. Exit 0 when\n"
    "inferd would start (also with no RDMA devices: collectives over TCP), 1 when it would\n"
    "refuse, 2 for bad flags.\n"
    "--config reads [parallel] master_addr, [fabric] interface and [fabric] sysfs_root from\n"
    "inferd's configuration file; the flags override it.\n";

}  // namespace

int cmd_fabric(const Args& args) {
  if (args.has("help")) {
    std::cout << kUsage;
    return 0;
  }
  args.allow_only({"config", "sysfs-root", "master-addr", "interface", "help"});
  if (!args.positional.empty()) throw std::invalid_argument("unexpected argument '" + args.positional[0] + "'");
  std::string master, interface, root = "/sys";
  if (args.has("config")) {
    const std::string path = args.get("config", "");
    const std::vector<std::string_view> flags = {"--config", path};
    daemon::Config cfg;
    try {
      cfg = daemon::load_config(daemon::parse_command_line(flags));
    } catch (const daemon::ConfigError& e) {
      throw std::invalid_argument(e.what());
    }
    master = cfg.parallel.master_addr;
    interface = cfg.fabric.interface;
    root = cfg.fabric.sysfs_root;
  }
  const fabric::Request request{args.get("master-addr", master), args.get("interface", interface),
                                fabric::process_env(), {}};
  const fabric::Preflight p = fabric::run_preflight(args.get("sysfs-root", root), request);
  if (const std::string v = fabric::verbs_line(p); !v.empty()) std::cout << v << "\n";
  std::cout << fabric::format_table(p.table);
  if (request.master_addr.empty() && request.interface.empty() && !p.table.ports.empty()) {
    std::cout << "no choice: give --master-addr ADDR or --interface IF\n";
    return 0;
  }
  std::cout << fabric::format_decision(p.decision, request);
  return p.decision.ok() ? 0 : 1;
}

}  // namespace inferd::tools
