#include "fabric/select.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include <fmt/format.h>

#include "fabric/env.hpp"

namespace inferd::fabric {

const char* const kNoDevices = "no RDMA devices; collectives over TCP";

namespace {

std::optional<uint32_t> parse_ipv4(const std::string& text) {
  in_addr a{};
  if (inet_pton(AF_INET, text.c_str(), &a) != 1) return std::nullopt;
  return ntohl(a.s_addr);
}

std::optional<in6_addr> parse_gid(const std::string& gid) {
  in6_addr a{};
  if (inet_pton(AF_INET6, gid.c_str(), &a) != 1) return std::nullopt;
  return a;
}

std::string port_name(const Port& p) { return fmt::format("{} port {}", p.device, p.port); }

struct Candidate {
  const Port* port;
  const GidEntry* gid;
  std::string address;
  int bits;
};

// Which candidate wins: the longest prefix shared with the master, then an
// active port, then the table's order (device, port, index) so ties are stable.
bool better(const Candidate& a, const Candidate& b) {
  if (a.bits != b.bits) return a.bits > b.bits;
  if (a.port->active() != b.port->active()) return a.port->active();
  return false;
}

}  // namespace

std::optional<std::string> mapped_ipv4(const std::string& gid) {
  const auto a = parse_gid(gid);
  if (!a || !IN6_IS_ADDR_V4MAPPED(&*a)) return std::nullopt;
  char buf[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &a->s6_addr[12], buf, sizeof buf);
  return std::string(buf);
}

std::string gid_address(const std::string& gid) {
  if (auto v4 = mapped_ipv4(gid)) return *v4;
  const auto a = parse_gid(gid);
  if (!a) return gid;
  char buf[INET6_ADDRSTRLEN];
  inet_ntop(AF_INET6, &*a, buf, sizeof buf);
  return buf;
}

Decision decide(const FabricTable& table, const Request& request) {
  Decision d;
  // The socket transports (NCCL's bootstrap, Gloo) still need the interface on
  // the master's network: from the kernel's own addresses, as each node names
  // its interfaces. A master on loopback keeps the group on this host.
  auto socket_only = [&](const char* why) {
    d.skipped = why;
    const auto master = parse_ipv4(request.master_addr);
    if (!request.interface.empty() || (master && (*master >> 24) != 127))
      d.socket = socket_interface(request.kernel_addresses, request.master_addr, request.interface);
    if (d.socket) d.env = check_socket_env(*d.socket, request.env);
    return d;
  };
  if (table.ports.empty()) return socket_only(kNoDevices);
  // The choice is by IP address, which only RoCE ports carry in their GIDs. On
  // InfiniBand NCCL finds the HCA and its GID itself; the monitor still watches.
  if (std::none_of(table.ports.begin(), table.ports.end(), [](const Port& p) { return p.link_layer != "InfiniBand"; }))
    return socket_only("InfiniBand ports only: no RoCE port to choose, NCCL picks the HCA and GID itself");
  const auto master = parse_ipv4(request.master_addr);
  if (master && (*master >> 24) == 127 && request.interface.empty()) {
    d.skipped = fmt::format("master address {} is loopback: the group stays on this host, no fabric to choose",
                            request.master_addr);
    return d;
  }
  if (!master && request.interface.empty()) {
    d.refusal = fmt::format("master address '{}' is not an IPv4 address; name the interface with [fabric] interface",
                            request.master_addr);
    return d;
  }
  if (!request.interface.empty() && !table.interfaces.count(request.interface)) {
    std::string known;
    for (const auto& [name, ni] : table.interfaces) known += (known.empty() ? "" : ", ") + name;
    d.refusal = fmt::format("interface {} carries no RDMA GID entry (interfaces with RDMA ports: {})",
                            request.interface, known.empty() ? "none" : known);
    return d;
  }

  std::vector<Candidate> v2;  // RoCE v2, IPv4-mapped: this node's candidate addresses
  std::vector<Candidate> v1;  // the same addresses on RoCE v1 entries, for the refusal message
  for (const Port& p : table.ports) {
    for (const GidEntry& g : p.gids) {
      if (!request.interface.empty() && g.ndev != request.interface) continue;
      const auto addr = mapped_ipv4(g.gid);
      if (!addr) continue;
      const int bits = master ? std::countl_zero(*master ^ *parse_ipv4(*addr)) : 0;
      (is_roce_v2(g) ? v2 : v1).push_back({&p, &g, *addr, bits});
    }
  }
  const std::string scope = request.interface.empty() ? std::string("any port")
                                                      : "interface " + request.interface;
  if (v2.empty()) {
    d.refusal = v1.empty() ? fmt::format("no RoCE v2 GID entry with an IPv4 address on {}", scope)
                           : fmt::format("no RoCE v2 GID entry with an IPv4 address on {} ({} port {} index {} holds {} "
                                         "as {} only)",
                                         scope, v1[0].port->device, v1[0].port->port, v1[0].gid->index,
                                         v1[0].address, v1[0].gid->type.empty() ? "an untyped entry" : v1[0].gid->type);
    return d;
  }
  const Candidate* best = &v2[0];
  for (const Candidate& c : v2)
    if (better(c, *best)) best = &c;
  // Without the first octet in common the address is on another network: a
  // guess there would send the collectives the wrong way.
  if (master && request.interface.empty() && best->bits < 8) {
    std::string held;
    for (const Candidate& c : v2) held += (held.empty() ? "" : ", ") + c.address;
    d.refusal = fmt::format("no RoCE v2 address on the master's network {} (this node holds {}); name the interface "
                            "with [fabric] interface",
                            request.master_addr, held);
    return d;
  }
  d.choice = Choice{best->gid->ndev, best->port->device, best->port->port, best->gid->index, best->address,
                    best->bits};
  const Port& port = *best->port;
  if (!port.active()) {
    d.refusal = fmt::format("{}: port is {} (physical state {}); it holds {} on {}", port_name(port),
                            port.state.empty() ? "not active" : port.state,
                            port.phys_state.empty() ? "unknown" : port.phys_state, best->address, best->gid->ndev);
    return d;
  }
  d.env = check_env(*d.choice, port, request.env);
  for (const EnvCheck& e : d.env)
    if (!e.problem.empty()) d.refusal += (d.refusal.empty() ? "" : "; ") + e.problem;
  return d;
}

}  // namespace inferd::fabric
