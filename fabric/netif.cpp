#include "fabric/netif.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <bit>
#include <cstdint>

namespace inferd::fabric {

namespace {

std::optional<uint32_t> parse_ipv4(const std::string& text) {
  in_addr a{};
  if (inet_pton(AF_INET, text.c_str(), &a) != 1) return std::nullopt;
  return ntohl(a.s_addr);
}

}  // namespace

std::vector<InterfaceAddress> kernel_ipv4_addresses() {
  std::vector<InterfaceAddress> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (const ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP)) continue;
    const auto* a = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
    const auto* m = reinterpret_cast<const sockaddr_in*>(i->ifa_netmask);
    char buf[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf);
    const int prefix = m ? std::popcount(ntohl(m->sin_addr.s_addr)) : 32;
    out.push_back({i->ifa_name, buf, prefix, (i->ifa_flags & IFF_LOOPBACK) != 0});
  }
  freeifaddrs(list);
  return out;
}

std::optional<SocketChoice> socket_interface(const std::vector<InterfaceAddress>& addresses,
                                             const std::string& master_addr, const std::string& configured) {
  if (!configured.empty()) {
    for (const InterfaceAddress& a : addresses)
      if (a.interface == configured) return SocketChoice{a.interface, a.address, a.prefix_len, true};
    return std::nullopt;
  }
  const auto master = parse_ipv4(master_addr);
  if (!master) return std::nullopt;
  const InterfaceAddress* best = nullptr;
  for (const InterfaceAddress& a : addresses) {
    const auto mine = parse_ipv4(a.address);
    if (!mine || a.prefix_len < 0 || a.prefix_len > 32) continue;
    const uint32_t mask = a.prefix_len == 0 ? 0 : ~uint32_t{0} << (32 - a.prefix_len);
    if ((*mine & mask) != (*master & mask)) continue;
    if (best == nullptr || a.prefix_len > best->prefix_len) best = &a;
  }
  if (best == nullptr) return std::nullopt;
  return SocketChoice{best->interface, best->address, best->prefix_len, false};
}

}  // namespace inferd::fabric
