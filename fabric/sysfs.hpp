// Reads the fabric from a sysfs tree: class/infiniband/<dev>/ports/<n>/... and
// class/net/<if>/... . The root is /sys on a node and a recorded copy in tests.
#pragma once
#include <string>

#include "fabric/table.hpp"

namespace inferd::fabric {

// Every port of every device under ROOT/class/infiniband (none when the folder
// is absent: a node without RDMA), and the interfaces their GIDs name. Throws
// std::runtime_error when ROOT itself is not a readable directory, so a
// mistyped --sysfs-root is not taken for a node without devices.
FabricTable read_sysfs(const std::string& root);

// "4: ACTIVE" -> {4, "ACTIVE"}; {0, text} when there is no number.
std::pair<int, std::string> parse_numbered(const std::string& text);

}  // namespace inferd::fabric
