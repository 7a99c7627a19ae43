// silu(g) * u with the CPU's scalar formula (kernels/cpu/kernel_table.hpp), one
// definition for silu_mul and for the decode GEMV that ends in it, so the two
// paths give the same bits.
#pragma once
#include <cuda_runtime.h>

namespace inferd::kernels::cuda {

__device__ inline float silu_times(float g, float u) {
  const float e = static_cast<float>(exp(-static_cast<double>(g)));
  return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, e)), u);
}

}  // namespace inferd::kernels::cuda
