// Choosing a backend by name, as operators write it: "cpu", "cuda" (device 0)
// or "cuda:N". The CUDA names are accepted only by builds with CUDA.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "kernels/backend.hpp"

namespace inferd::kernels {

// The CUDA device "cuda" (0) or "cuda:N" names, or nullopt when it names none.
std::optional<int> cuda_device_index(std::string_view device);
// Why `device` cannot be used by this build, or "" when it can.
std::string device_error(std::string_view device);
// The backend `device` names; `threads` is the CPU backend's (0: one per core).
// Throws std::invalid_argument with device_error()'s text for a bad name.
std::unique_ptr<Backend> make_backend(std::string_view device, int threads);

}  // namespace inferd::kernels
