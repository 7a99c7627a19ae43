// The fabric as plain values: RDMA ports with their GID tables and counters,
// and the network interfaces behind them. Read from sysfs (sysfs.hpp) or built
// by hand in tests; the selection (select.hpp) works on these values alone, so a
// recorded tree reproduces a node's choice.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace inferd::fabric {

// One GID table entry: ports/<n>/gids/<index> and gid_attrs/{types,ndevs}/<index>.
struct GidEntry {
  int index = 0;
  std::string gid;   // as sysfs writes it: eight groups of four hex digits
  std::string type;  // "RoCE v2", "IB/RoCE v1", or "" when sysfs gives none
  std::string ndev;  // the network interface it belongs to; "" on InfiniBand
  bool operator==(const GidEntry&) const = default;
};

struct Port {
  std::string device;  // e.g. mlx5_0
  int port = 0;        // 1-based, as ibv_query_port numbers them
  int state_code = 0;  // 4 is ACTIVE (IBV_PORT_ACTIVE)
  std::string state;   // "ACTIVE", "DOWN", ...
  std::string phys_state;  // "LinkUp", "Disabled", ...
  std::string rate;        // "200 Gb/sec (4X HDR)"
  std::string link_layer;  // "Ethernet" (RoCE) or "InfiniBand"
  std::optional<int> active_mtu;  // bytes; only from ibv_query_port
  std::vector<GidEntry> gids;     // non-zero entries, by index
  std::map<std::string, uint64_t> counters;     // ports/<n>/counters/*
  std::map<std::string, uint64_t> hw_counters;  // ports/<n>/hw_counters/*
  bool active() const { return state_code == 4; }
  const GidEntry* gid(int index) const {
    for (const GidEntry& g : gids)
      if (g.index == index) return &g;
    return nullptr;
  }
  bool operator==(const Port&) const = default;
};

// class/net/<name>: the interface a RoCE GID entry names.
struct NetInterface {
  std::string name;
  int mtu = 0;
  std::string operstate;  // "up", "down", ...
  bool operator==(const NetInterface&) const = default;
};

struct FabricTable {
  std::vector<Port> ports;  // by device name, then port number
  std::map<std::string, NetInterface> interfaces;
  bool operator==(const FabricTable&) const = default;
};

// "RoCE v2" entries are the ones NCCL's IB transport routes over IP.
inline bool is_roce_v2(const GidEntry& g) { return g.type == "RoCE v2"; }

}  // namespace inferd::fabric
