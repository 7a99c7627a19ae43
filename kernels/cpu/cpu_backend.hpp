// Choosing the CPU backend's instruction set explicitly (tests, benchmarks);
// make_cpu_backend(threads) picks the best one the CPU supports, or the one the
// environment variable INFERD_CPU_ISA names (scalar, avx2, avx512; auto or unset:
// the best). A CPU backend keeps scratch buffers between calls: use it from one
// thread at a time.
#pragma once
#include <memory>

#include "kernels/backend.hpp"

namespace inferd::kernels {

enum class CpuIsa { Auto, Scalar, Avx2, Avx512 };

bool cpu_isa_available(CpuIsa isa);
// Throws std::invalid_argument when `isa` (or for Auto, the one INFERD_CPU_ISA
// names) is not available on this CPU or build.
std::unique_ptr<Backend> make_cpu_backend(int threads, CpuIsa isa);

}  // namespace inferd::kernels
