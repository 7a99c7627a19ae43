// The ports as libibverbs sees them (ibv_get_device_list, ibv_query_port): what
// sysfs does not say, the active MTU, and a check that the devices sysfs lists
// can be opened. Only on a build with -Drdma (libibverbs); only for the live
// /sys, never for a recorded tree.
#pragma once
#include <string>
#include <vector>

#include "fabric/table.hpp"

namespace inferd::fabric {

struct VerbsPort {
  std::string device;
  int port = 0;
  int state = 0;       // enum ibv_port_state; 4 is ACTIVE
  int active_mtu = 0;  // bytes
  std::string link_layer;  // "Ethernet", "InfiniBand"
  int speed = 0;  // ibv_port_attr::active_speed, as libibverbs encodes it
  int width = 0;  // ibv_port_attr::active_width, as libibverbs encodes it
};

struct VerbsReport {
  bool built = false;    // this build has libibverbs
  std::string error;     // why the devices could not be listed or queried; "" if they could
  std::vector<VerbsPort> ports;  // empty: no RDMA devices
};

VerbsReport probe_verbs();

// Copies each port's active MTU from the report into the table.
void merge_verbs(FabricTable& table, const VerbsReport& report);

}  // namespace inferd::fabric
