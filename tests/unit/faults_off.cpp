// Compiled with INFERD_FAULTS=0 whatever the build's `faults` option: checks, at
// compile time, what a build without fault points gets from faults/fault_points.hpp.
// Its own executable, since one program must see one FaultPoint.
#include "faults/fault_points.hpp"

namespace faults = inferd::faults;

static_assert(!faults::kBuiltIn);
// A constant: the code a point guards is folded away.
static_assert(!faults::FaultPoint("heartbeat.stall").armed());
constexpr faults::FaultPoint kPoint("step.stall");
static_assert(!kPoint.armed());

int main() { return faults::disarm_fault("step.stall") ? 1 : 0; }
