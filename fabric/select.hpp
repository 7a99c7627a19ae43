// The pre-flight choice: which interface, RDMA device, port and RoCE v2 GID
// index this node's collectives use to reach the master, or why none can be
// used. Plain values in and out, so a recorded sysfs tree reproduces it.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "fabric/netif.hpp"
#include "fabric/table.hpp"

namespace inferd::fabric {

struct Request {
  std::string master_addr;  // the head's IPv4 address
  std::string interface;    // [fabric] interface: only this interface's entries; "" for any
  // Operator-set values of the variables env_names() lists; absent when unset.
  std::map<std::string, std::string> env;
  // The kernel's IPv4 interfaces (kernel_ipv4_addresses()): where the socket
  // transports go when there is no RDMA device to choose.
  std::vector<InterfaceAddress> kernel_addresses;
};

struct Choice {
  std::string interface;
  std::string device;
  int port = 0;
  int gid_index = 0;
  std::string address;  // the entry's IPv4 address: this node's on the master's subnet
  int common_prefix_bits = 0;  // shared with the master's address
  bool operator==(const Choice&) const = default;
};

// One variable the collectives read: what the fabric says, what the operator
// set (if anything), and what is wrong with the operator's value ("" if nothing).
struct EnvCheck {
  std::string name;
  std::string value;
  std::optional<std::string> operator_value;
  std::string problem;
};

struct Decision {
  std::optional<Choice> choice;
  // Why the node must not serve on this fabric; "" when it may. Names the
  // device, port and what is wrong.
  std::string refusal;
  // Why no choice was needed (no RDMA devices, a master on loopback); "" otherwise.
  std::string skipped;
  std::vector<EnvCheck> env;  // with a choice, or with `socket`
  // With no RDMA device (or InfiniBand ports only): the kernel interface on the master's network, whose
  // name NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME get (`env` holds those two;
  // an operator's wrong value there is reported, never refused).
  std::optional<SocketChoice> socket;
  bool ok() const { return refusal.empty(); }
};

// The variables the choice sets for NCCL, Gloo and UCX, in export order.
const std::vector<std::string>& env_names();

// "no RDMA devices; collectives over TCP"
extern const char* const kNoDevices;

Decision decide(const FabricTable& table, const Request& request);

// "0000:0000:0000:0000:0000:ffff:0a00:0005" -> "10.0.0.5"; nullopt unless IPv4-mapped.
std::optional<std::string> mapped_ipv4(const std::string& gid);
// A GID as an address: dotted IPv4 when mapped, else compressed IPv6; the text
// itself when it does not parse.
std::string gid_address(const std::string& gid);

}  // namespace inferd::fabric
