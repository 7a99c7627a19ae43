// The table and the decision as text: what `inferctl fabric` prints and the
// daemon logs at pre-flight.
#pragma once
#include <string>

#include "fabric/select.hpp"

namespace inferd::fabric {

std::string format_table(const FabricTable& table);
// The choice and each variable (exported, agreeing or wrong), then the refusal.
std::string format_decision(const Decision& d, const Request& request);
// "socket interface fab0 (10.77.0.2/24, on the master's subnet)"
std::string socket_line(const SocketChoice& socket);
// One line for a log: the choice, or the refusal, or why none was needed.
std::string summary_line(const Decision& d);

}  // namespace inferd::fabric
