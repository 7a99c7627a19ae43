// The kernel's IPv4 interfaces (getifaddrs) of the network namespace inferd
// runs in, and the one on the master's network: what NCCL's and Gloo's socket
// transports use when the node has no RDMA device (or besides one).
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace inferd::fabric {

struct InterfaceAddress {
  std::string interface;
  std::string address;  // dotted IPv4
  int prefix_len = 0;   // from the netmask
  bool loopback = false;
  bool operator==(const InterfaceAddress&) const = default;
};

// The interfaces that are up and hold an IPv4 address, in getifaddrs' order.
std::vector<InterfaceAddress> kernel_ipv4_addresses();

// The socket interface the collectives take to reach the master.
struct SocketChoice {
  std::string interface;
  std::string address;  // this node's address on it
  int prefix_len = 0;
  bool configured = false;  // [fabric] interface named it
  bool operator==(const SocketChoice&) const = default;
};

// With `configured` set: that interface, if it holds an IPv4 address.
// Otherwise the interface whose subnet (address and prefix) holds the master's
// address, the most specific subnet first, then the list's order; nullopt when
// no subnet holds it (a routed master: NCCL and Gloo keep their own pick) or
// the master is not an IPv4 address.
std::optional<SocketChoice> socket_interface(const std::vector<InterfaceAddress>& addresses,
                                             const std::string& master_addr, const std::string& configured);

}  // namespace inferd::fabric
