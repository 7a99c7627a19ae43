// The fabric pre-flight at start-up of a group spanning nodes (nnodes > 1):
// choose interface, RDMA device, port and RoCE v2 GID index for the master's
// address, export the collectives' variables, or refuse to leave Loading.
#pragma once
#include <string>

#include "cluster/messages.hpp"
#include "daemon/config.hpp"

namespace inferd::daemon {

// Logs the choice (or "no RDMA devices; collectives over TCP") and exports the
// variables the operator left unset. Throws std::runtime_error naming the
// device, port and reason when the node must not serve on this fabric. Runs
// before the collectives start: setenv() is not safe beside threads that read
// the environment, and the collectives read it once, when they start.
void fabric_preflight(const Config& cfg);

// The choice as ranks exchange it when the group forms, read again as the
// pre-flight read it: interface, device, port, GID index, address, and the
// port's link layer and MTU (libibverbs' active MTU on a live node, else the
// interface's); with no RDMA device the socket interface and address alone.
// Empty when there is no choice (one node, a refusal, nothing on the master's
// network).
cluster::FabricChoice fabric_identity(const Config& cfg);

}  // namespace inferd::daemon
