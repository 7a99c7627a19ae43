// The pre-flight as inferd and `inferctl fabric` run it: read the table from
// sysfs (and, for the live /sys, ask libibverbs for what sysfs lacks), then decide.
#pragma once
#include <string>

#include "fabric/select.hpp"
#include "fabric/verbs.hpp"

namespace inferd::fabric {

struct Preflight {
  FabricTable table;
  bool live = false;   // the sysfs root is /sys: libibverbs was asked too
  VerbsReport verbs;   // when live
  Decision decision;
};

// Reads the kernel's interfaces (kernel_ipv4_addresses()) unless the request
// carries them. Throws std::runtime_error when the root is not a directory.
Preflight run_preflight(const std::string& sysfs_root, const Request& request);

// What libibverbs said, in one line ("" when not live).
std::string verbs_line(const Preflight& p);

}  // namespace inferd::fabric
