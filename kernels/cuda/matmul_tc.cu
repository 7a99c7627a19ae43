// Matmul on the tensor cores, for steps of many tokens (prefill). cuBLAS runs
// the GEMM in half precision with float accumulation; the quantized weights
// (Q4_0, Q4_1, Q8_0) are first dequantized to halves, a slab of rows at a time
// into scratch, so the scratch stays small whatever the matrix. F16 and BF16
// weights are read where they lie. The activations are rounded to the weights'
// half type (F16, or BF16 for BF16 weights) once per call.
//
// This trades exactness against the CPU (which quantizes activations to int8
// blocks) for speed: a GEMM of hundreds of tokens is bound by arithmetic, which
// the tensor cores do many times faster than dp4a on the CUDA cores. The
// dequantization costs one pass over the weights per call, small beside the GEMM
// at prefill sizes; decode sizes keep the GEMV of matmul.cu, bound by reading
// the quantized bytes.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/cuda/cuda_ops.hpp"
#include "kernels/cuda/launch.cuh"
#include "kernels/quant_blocks.hpp"

namespace inferd::kernels::cuda {
namespace {

void check_blas(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(what) + ": " + cublasGetStatusString(s));
}

__device__ inline float half_bits(uint16_t h) { return __half2float(__ushort_as_half(h)); }

// Eight consecutive values (quarter `part` of block `b`) of a quantized row, as halves.
template <class Block>
__device__ inline void dequant8(const uint8_t* row, int64_t b, int part, __half (&out)[8]) {
  const uint8_t* p = row + b * sizeof(Block);
  const auto* u16 = reinterpret_cast<const uint16_t*>(p);
  if constexpr (sizeof(Block) == sizeof(BlockQ8_0)) {
    const float d = half_bits(u16[0]);
    const auto* qs = reinterpret_cast<const int8_t*>(p + 2) + part * 8;
#pragma unroll
    for (int i = 0; i < 8; ++i) out[i] = __float2half_rn(d * static_cast<float>(qs[i]));
  } else {
    constexpr bool kMin = sizeof(Block) == sizeof(BlockQ4_1);
    const float d = half_bits(u16[0]);
    const float m = kMin ? half_bits(u16[1]) : -8.0f * d;
    // Elements 0..15 are the low nibbles of qs[0..15], 16..31 the high ones.
    const uint8_t* qs = p + (kMin ? 4 : 2) + (part % 2) * 8;
    const int shift = part < 2 ? 0 : 4;
#pragma unroll
    for (int i = 0; i < 8; ++i) out[i] = __float2half_rn(d * static_cast<float>((qs[i] >> shift) & 0x0f) + m);
  }
}

// One thread per eight values: rows [r0, r0 + n_rows) of w into dst ([n_rows][cols] halves).
template <class Block>
__global__ void dequant_rows(const uint8_t* w, size_t row_stride, int64_t r0, int64_t n_rows, int64_t nb,
                             __half* dst) {
  grid_dependency();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n_rows * nb * 4) return;
  const int64_t r = i / (nb * 4), b = (i / 4) % nb;
  const int part = static_cast<int>(i % 4);
  __half v[8];
  dequant8<Block>(w + (r0 + r) * row_stride, b, part, v);
  *reinterpret_cast<uint4*>(dst + r * nb * 32 + b * 32 + part * 8) = *reinterpret_cast<const uint4*>(v);
}

template <class H>
__global__ void round_act(const float* x, int64_t n, H* out) {
  grid_dependency();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  if constexpr (std::is_same_v<H, __half>)
    out[i] = __float2half_rn(x[i]);
  else
    out[i] = __float2bfloat16_rn(x[i]);
}

unsigned blocks_for(int64_t threads) { return static_cast<unsigned>((threads + 255) / 256); }

template <class Block>
void dequant_slab(const WeightView& w, int64_t r0, int64_t n_rows, __half* dst, cudaStream_t stream) {
  const int64_t nb = w.cols / kQuantBlock;
  launch_kernel(dequant_rows<Block>, blocks_for(n_rows * nb * 4), 256, 0, stream, static_cast<const uint8_t*>(w.data),
                w.row_stride, r0, n_rows, nb, dst);
}

}  // namespace

bool takes_tensor_cores(DType t) {
  return t == DType::F16 || t == DType::BF16 || t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q8_0;
}

int64_t tensor_core_scratch_bytes(const WeightView& w, int64_t n_tokens) {
  const int64_t act = (n_tokens * w.cols * 2 + 255) / 256 * 256;
  if (w.type == DType::F16 || w.type == DType::BF16) return act;
  return act + std::min(w.rows, tensor_core_slab_rows(w.cols)) * w.cols * 2;
}

int64_t tensor_core_slab_rows(int64_t cols) {
  // 32 Mi halves (64 MiB) of dequantized weights at a time, whole 128-row tiles.
  const int64_t rows = (int64_t(32) << 20) / std::max<int64_t>(cols, 1);
  return std::max<int64_t>(128, rows / 128 * 128);
}

void matmul_tensor_cores(cublasHandle_t blas, const WeightView& w, const float* x, int64_t n_tokens, float* y,
                         void* scratch, cudaStream_t stream) {
  if (!takes_tensor_cores(w.type)) throw std::invalid_argument("matmul_tensor_cores: weight type not taken");
  if (w.cols % kQuantBlock != 0 && w.type != DType::F16 && w.type != DType::BF16)
    throw std::invalid_argument("matmul_tensor_cores: quantized row length not a multiple of 32");
  check_blas(cublasSetStream(blas, stream), "cublasSetStream");
  const bool bf16 = w.type == DType::BF16;
  const cudaDataType half_type = bf16 ? CUDA_R_16BF : CUDA_R_16F;
  const int64_t n_act = n_tokens * w.cols;
  void* act = scratch;
  if (bf16)
    launch_kernel(round_act<__nv_bfloat16>, blocks_for(n_act), 256, 0, stream, x, n_act,
                  static_cast<__nv_bfloat16*>(act));
  else
    launch_kernel(round_act<__half>, blocks_for(n_act), 256, 0, stream, x, n_act, static_cast<__half*>(act));
  check_launch("matmul: round activations");
  auto* slab = reinterpret_cast<__half*>(static_cast<uint8_t*>(scratch) + (n_act * 2 + 255) / 256 * 256);
  const float alpha = 1.0f, beta = 0.0f;
  const bool dequant = w.type != DType::F16 && !bf16;
  const int64_t step = dequant ? tensor_core_slab_rows(w.cols) : w.rows;
  for (int64_t r0 = 0; r0 < w.rows; r0 += step) {
    const int64_t n_rows = std::min(step, w.rows - r0);
    const void* a = nullptr;
    int64_t lda = 0;
    if (dequant) {
      switch (w.type) {
        case DType::Q4_0: dequant_slab<BlockQ4_0>(w, r0, n_rows, slab, stream); break;
        case DType::Q4_1: dequant_slab<BlockQ4_1>(w, r0, n_rows, slab, stream); break;
        default: dequant_slab<BlockQ8_0>(w, r0, n_rows, slab, stream); break;
      }
      check_launch("matmul: dequantize weights");
      a = slab;
      lda = w.cols;
    } else {
      if (w.row_stride % 2 != 0) throw std::invalid_argument("matmul_tensor_cores: odd row stride");
      a = static_cast<const uint8_t*>(w.data) + r0 * w.row_stride;
      lda = static_cast<int64_t>(w.row_stride / 2);
    }
    // Row-major W [rows][cols] is column-major W^T; y^T = W x^T in column-major
    // is row-major y [tokens][rows], each slab writing its rows' columns of it.
    check_blas(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n_rows), static_cast<int>(n_tokens),
                            static_cast<int>(w.cols), &alpha, a, half_type, static_cast<int>(lda), act, half_type,
                            static_cast<int>(w.cols), &beta, y + r0, CUDA_R_32F, static_cast<int>(w.rows),
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "matmul: cublasGemmEx");
  }
}

}  // namespace inferd::kernels::cuda
