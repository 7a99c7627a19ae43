// The CUDA backend: every op of kernels/backend.hpp as kernels on one stream of
// one device, with the backend's memory in that device's global memory
// (host_visible() is false: the engine uploads weights and step inputs). Ops
// are queued on the stream and return before they finish; upload() and
// download() wait for everything queued before them. CUDA failures throw
// std::runtime_error naming the call. Declared without CUDA headers, so any
// C++ file can include it; built only when INFERD_HAVE_CUDA is 1.
#pragma once
#include <cstdint>
#include <memory>

#include "kernels/backend.hpp"

namespace inferd::kernels {

// How many CUDA devices this process can use (0 when there is no driver or device).
int cuda_device_count();

struct CudaOptions {
  // Eager steps of at least this many tokens multiply F16 and BF16 weights on
  // the tensor cores (cuBLAS, activations rounded to halves); fewer run the
  // GEMV and tiled kernels that match the CPU backend's arithmetic.
  int64_t tensor_core_min_tokens = 16;
  // The same for Q4_0, Q4_1 and Q8_0 (dequantized to halves for cuBLAS). Below
  // it the int8 tensor-core kernel, which matches the CPU's arithmetic too and,
  // since its mma are issued ahead of their scaling, is the faster up to 64
  // tokens on an H100 for the 8B's FFN weights (docs/PERFORMANCE.md).
  int64_t quantized_tensor_core_min_tokens = 65;
  // One-token steps on Q4_0, Q4_1 and Q8_0 weights: the GEMV quantizes its own
  // input and the gate/up GEMV ends in silu(gate) * up, so neither quantize_act
  // nor silu_mul is launched (cuda_ops.hpp, Fuse). Off until measured on a GPU
  // (docs/PERFORMANCE.md); INFERD_CUDA_FUSE=1 in the environment turns it on.
  bool fuse_one_token = false;

  // The first token count that takes cuBLAS for weights of type t.
  int64_t tensor_core_from(DType t) const {
    const bool quantized = t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q8_0;
    return quantized ? quantized_tensor_core_min_tokens : tensor_core_min_tokens;
  }
};

// Throws std::runtime_error when `device` cannot be used.
std::unique_ptr<Backend> make_cuda_backend(int device, CudaOptions opts = {});

}  // namespace inferd::kernels
