// Abandoning a step on request (a recovery's reset): the engine raises a flag
// the backend was given; its ops stop at the next op or task boundary and throw
// Cancelled, and the engine drops whatever the step had computed.
#pragma once
#include <atomic>
#include <stdexcept>

namespace inferd::kernels {

struct Cancelled : std::runtime_error {
  Cancelled() : std::runtime_error("the step was cancelled") {}
};

inline bool cancel_requested(const std::atomic<bool>* flag) {
  return flag != nullptr && flag->load(std::memory_order_relaxed);
}

}  // namespace inferd::kernels
