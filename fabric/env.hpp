// The environment the collectives read: NCCL's and Gloo's interface and HCA,
// NCCL's GID index, and UCX's registration-cache safeguards. Unset variables
// are exported from the choice; operator-set ones are checked against it.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "fabric/select.hpp"

namespace inferd::fabric {

std::vector<EnvCheck> check_env(const Choice& choice, const Port& port,
                                const std::map<std::string, std::string>& operator_env);

// NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME alone, for a node without RDMA devices.
std::vector<EnvCheck> check_socket_env(const SocketChoice& socket,
                                       const std::map<std::string, std::string>& operator_env);

// The process's values of env_names(), the ones set.
std::map<std::string, std::string> process_env();

// setenv() for each check the operator left unset; returns "NAME=value" for each.
// Call before any thread that reads the environment starts its collectives.
std::vector<std::string> export_env(const std::vector<EnvCheck>& checks);

}  // namespace inferd::fabric
