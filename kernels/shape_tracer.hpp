// The shape tracer: a Backend that computes nothing and only registers the shape
// key each op would launch with. Running a model's forward pass on it answers
// "which keys does a step of this shape touch" in microseconds, which is how the
// engine derives the reachable key set for warm-up without running the kernels.
#pragma once
#include <memory>

#include "kernels/backend.hpp"

namespace inferd::kernels {

// Keys go to `reg` (not the global registry, so probing never counts as use).
std::unique_ptr<Backend> make_shape_tracer(ShapeRegistry& reg);

}  // namespace inferd::kernels
