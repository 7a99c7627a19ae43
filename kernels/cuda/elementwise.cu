// The CUDA backend's row and elementwise ops: embedding lookup, rmsnorm, rope,
// silu_mul, gelu_mul, scale, softcap, add and the KV cache store. Each reproduces the CPU scalar kernels'
// order of float operations (explicit __f*_rn: no contraction into FMAs), so
// results agree to the last bit except where a libm function rounds differently.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>

#include "kernels/cuda/activation.cuh"
#include "kernels/cuda/cuda_ops.hpp"
#include "kernels/cuda/launch.cuh"
#include "kernels/quant_blocks.hpp"

namespace inferd::kernels::cuda {
namespace {

constexpr int kThreads = 256;

__device__ inline float half_bits(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ inline float bf16_bits(uint16_t h) { return __bfloat162float(__ushort_as_bfloat16(h)); }

// The 4-bit value of element j of a 32-element block's 16 packed bytes.
__device__ inline int nibble(const uint8_t* qs, int j) { return j < 16 ? qs[j] & 0x0f : qs[j - 16] >> 4; }

// Element c of a row in `type`, as dequantize_row computes it.
__device__ float dequant_element(DType type, const uint8_t* row, int64_t c) {
  const int64_t b = c / kQuantBlock;
  const int j = static_cast<int>(c % kQuantBlock);
  switch (type) {
    case DType::F32: return reinterpret_cast<const float*>(row)[c];
    case DType::F16: return half_bits(reinterpret_cast<const uint16_t*>(row)[c]);
    case DType::BF16: return bf16_bits(reinterpret_cast<const uint16_t*>(row)[c]);
    case DType::Q4_0: {
      const auto& blk = reinterpret_cast<const BlockQ4_0*>(row)[b];
      return __fmul_rn(static_cast<float>(nibble(blk.qs, j) - 8), half_bits(blk.d));
    }
    case DType::Q4_1: {
      const auto& blk = reinterpret_cast<const BlockQ4_1*>(row)[b];
      return __fadd_rn(__fmul_rn(static_cast<float>(nibble(blk.qs, j)), half_bits(blk.d)), half_bits(blk.m));
    }
    case DType::Q8_0: {
      const auto& blk = reinterpret_cast<const BlockQ8_0*>(row)[b];
      return __fmul_rn(static_cast<float>(blk.qs[j]), half_bits(blk.d));
    }
    case DType::Q8_1: {
      const auto& blk = reinterpret_cast<const BlockQ8_1*>(row)[b];
      return __fmul_rn(static_cast<float>(blk.qs[j]), half_bits(blk.d));
    }
    default: return 0.0f;
  }
}

__global__ void get_rows_kernel(WeightView table, const int32_t* ids, float* out, int* bad_id) {
  grid_dependency();
  const int64_t t = blockIdx.y;
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= table.cols) return;
  const int32_t id = ids[t];
  float v = 0.0f;
  if (id < 0 || id >= table.rows) {
    if (c == 0) *bad_id = 1;
  } else {
    v = dequant_element(table.type, static_cast<const uint8_t*>(table.data) + id * table.row_stride, c);
  }
  out[t * table.cols + c] = v;
}

// Squares in float, summed in double, like the reference.
// Row blockIdx.x: y = x / rms(x) * weight. With `residual`, x += residual first
// (written back), each thread adding and later scaling the same elements, so y
// may be the residual itself.
// A thread holds kNormPerThread of the row's elements in registers, loaded in
// one unrolled pass so that all its loads are in flight at once. A decode step
// normalizes one row on one SM, and a loop of dependent loads paid a memory round
// trip for each element a thread took (16 us for a row of 4096 on an H100).
constexpr int kNormPerThread = 8;
constexpr int kNormMaxThreads = 1024;

__global__ void rmsnorm_kernel(float* x, const float* residual, const float* weight, float* y, int64_t n, float eps) {
  grid_launch_dependents();
  // The norm's weights first: nothing writes them, so their round trip overlaps
  // the kernel before this one (the row waits for it).
  float wt[kNormPerThread];
#pragma unroll
  for (int k = 0; k < kNormPerThread; ++k) {
    const int64_t i = threadIdx.x + int64_t(k) * blockDim.x;
    wt[k] = i < n ? weight[i] : 0.0f;
  }
  grid_wait();
  __shared__ double partial[kNormMaxThreads / 32];
  __shared__ float row_scale;
  float* xr = x + int64_t(blockIdx.x) * n;
  float* yr = y + int64_t(blockIdx.x) * n;
  const float* rr = residual ? residual + int64_t(blockIdx.x) * n : nullptr;
  const int64_t chunk = int64_t(blockDim.x) * kNormPerThread;
  float v[kNormPerThread];
  double sum = 0;
  for (int64_t base = threadIdx.x; base < n; base += chunk) {
    float r[kNormPerThread];
#pragma unroll
    for (int k = 0; k < kNormPerThread; ++k) {
      const int64_t i = base + int64_t(k) * blockDim.x;
      v[k] = i < n ? xr[i] : 0.0f;
      r[k] = rr && i < n ? rr[i] : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < kNormPerThread; ++k) {
      const int64_t i = base + int64_t(k) * blockDim.x;
      if (rr) {
        v[k] = __fadd_rn(v[k], r[k]);
        if (i < n) xr[i] = v[k];
      }
      sum += static_cast<double>(__fmul_rn(v[k], v[k]));
    }
  }
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0;
    for (int w = 0; w < int(blockDim.x / 32); ++w) total += partial[w];
    const float mean = static_cast<float>(total / static_cast<double>(n));
    row_scale = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));
  }
  __syncthreads();
  const float scale = row_scale;
  if (n <= chunk) {  // the row is still in registers
#pragma unroll
    for (int k = 0; k < kNormPerThread; ++k) {
      const int64_t i = threadIdx.x + int64_t(k) * blockDim.x;
      if (i < n) yr[i] = __fmul_rn(__fmul_rn(v[k], scale), wt[k]);
    }
  } else {
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = __fmul_rn(__fmul_rn(xr[i], scale), weight[i]);
  }
}

// Threads for a row of n: enough for kNormPerThread elements each, in whole warps.
unsigned norm_threads(int64_t n) {
  const int64_t t = (n + kNormPerThread - 1) / kNormPerThread;
  return static_cast<unsigned>(std::min<int64_t>(kNormMaxThreads, std::max<int64_t>(32, (t + 31) / 32 * 32)));
}

// Rotates pair i of one head's vector v in place at position `pos` and returns
// the pair's indices and new values. theta is built by repeated multiplication
// in float, as the reference does, so every pair's angle has the reference's
// bits; cos and sin are taken in double and rounded once. rope_kernel and
// rope_kv_store_kernel both rotate through it, so they agree bit for bit.
struct RotatedPair {
  int a, b;
  float va, vb;
};
__device__ inline RotatedPair rope_pair(float* v, int i, int half, int32_t pos, float freq_scale, float theta_scale,
                                        bool neox) {
  float theta = static_cast<float>(pos);
  for (int k = 0; k < i; ++k) theta = __fmul_rn(theta, theta_scale);
  const double angle = static_cast<double>(__fmul_rn(freq_scale, theta));
  const float cs = static_cast<float>(cos(angle)), sn = static_cast<float>(sin(angle));
  const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
  const float x0 = v[a], x1 = v[b];
  const RotatedPair r{a, b, __fsub_rn(__fmul_rn(x0, cs), __fmul_rn(x1, sn)),
                      __fadd_rn(__fmul_rn(x0, sn), __fmul_rn(x1, cs))};
  v[a] = r.va;
  v[b] = r.vb;
  return r;
}

// One thread per rotated pair.
__global__ void rope_kernel(float* x, const int32_t* pos, int n_heads, int head_dim, int half, float freq_scale,
                            float theta_scale, bool neox) {
  grid_dependency();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= half) return;
  const int64_t t = blockIdx.z;
  const int h = blockIdx.y;
  rope_pair(x + (t * n_heads + h) * head_dim, i, half, pos[t], freq_scale, theta_scale, neox);
}

// The cache element of k or v: half or float, converted as kv_store_kernel does.
template <class T>
__device__ inline void cache_put(void* cache, int64_t at, float x) {
  if constexpr (sizeof(T) == 2)
    static_cast<__half*>(cache)[at] = __float2half_rn(x);
  else
    static_cast<float*>(cache)[at] = x;
}

// rope of q and of k, then kv_store of k and v, in one launch (the same
// arithmetic as rope_kernel then kv_store_kernel). Token blockIdx.y; its items,
// one per thread over the x axis: q's rotated pairs (rotated in place), k's
// rotated pairs (rotated in place and stored), then the n_kv_heads * head_dim
// elements of v (stored), each also storing k's element at that index when it
// lies past n_rot (not rotated). No item reads what another writes.
template <class T>
__global__ void rope_kv_store_kernel(float* q, float* k, const float* v, const int32_t* pos, int n_heads, int half,
                                     float freq_scale, float theta_scale, bool neox, KvLayerView kv,
                                     const AttnToken* toks) {
  grid_dependency();
  const int64_t t = blockIdx.y;
  const int64_t item = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int hd = kv.head_dim;
  const int64_t q_pairs = int64_t(n_heads) * half, k_pairs = int64_t(kv.n_kv_heads) * half;
  const int64_t row = int64_t(kv.n_kv_heads) * hd;
  if (item >= q_pairs + k_pairs + row) return;
  if (item < q_pairs) {
    const int64_t h = item / half;
    rope_pair(q + (t * n_heads + h) * hd, static_cast<int>(item % half), half, pos[t], freq_scale, theta_scale, neox);
    return;
  }
  const int32_t p = toks[t].pos;
  const int64_t slot = int64_t(toks[t].block_table[p / kv.block_size]) * kv.block_size + p % kv.block_size;
  if (item < q_pairs + k_pairs) {
    const int64_t u = item - q_pairs, h = u / half;
    const RotatedPair r = rope_pair(k + t * row + h * hd, static_cast<int>(u % half), half, pos[t], freq_scale,
                                    theta_scale, neox);
    cache_put<T>(kv.k, slot * row + h * hd + r.a, r.va);
    cache_put<T>(kv.k, slot * row + h * hd + r.b, r.vb);
    return;
  }
  const int64_t i = item - q_pairs - k_pairs;
  cache_put<T>(kv.v, slot * row + i, v[t * row + i]);
  if (i % hd >= 2 * half) cache_put<T>(kv.k, slot * row + i, k[t * row + i]);
}

__global__ void silu_mul_kernel(const float* gate, const float* up, float* out, int64_t n) {
  grid_dependency();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    out[i] = silu_times(gate[i], up[i]);
  }
}

// The CPU's formula (kernels/cpu/kernel_table.hpp): x * sigmoid(2 sqrt(2/pi) (x + 0.044715 x^3)).
__global__ void gelu_mul_kernel(const float* gate, const float* up, float* out, int64_t n) {
  grid_dependency();
  constexpr float k = 2.0f * 0.7978845608f;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float x = gate[i];
    const float z = __fmul_rn(k, __fadd_rn(x, __fmul_rn(__fmul_rn(__fmul_rn(0.044715f, x), x), x)));
    const float e = static_cast<float>(exp(-static_cast<double>(z)));
    out[i] = __fmul_rn(__fdiv_rn(x, __fadd_rn(1.0f, e)), up[i]);
  }
}

__global__ void scale_kernel(float* x, float s, int64_t n) {
  grid_dependency();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] = __fmul_rn(x[i], s);
}

__global__ void softcap_kernel(float* x, float cap, int64_t n) {
  grid_dependency();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] = __fmul_rn(cap, static_cast<float>(tanh(static_cast<double>(__fdiv_rn(x[i], cap)))));
}

__global__ void add_kernel(float* y, const float* x, int64_t n) {
  grid_dependency();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = __fadd_rn(y[i], x[i]);
}

// y[r][i] += x[i] for every row r of y: a bias over all rows in one launch.
__global__ void add_rows_kernel(float* y, const float* x, int64_t n_rows, int64_t n) {
  grid_dependency();
  const int64_t total = n_rows * n;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = __fadd_rn(y[i], x[i % n]);
}

template <class T>
__global__ void kv_store_kernel(KvLayerView kv, const AttnToken* toks, const float* k, const float* v) {
  grid_dependency();
  const int64_t row = int64_t(kv.n_kv_heads) * kv.head_dim;
  const int64_t t = blockIdx.y;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= row) return;
  const int32_t pos = toks[t].pos;
  const int64_t slot = int64_t(toks[t].block_table[pos / kv.block_size]) * kv.block_size + pos % kv.block_size;
  if constexpr (sizeof(T) == 2) {
    static_cast<__half*>(kv.k)[slot * row + i] = __float2half_rn(k[t * row + i]);
    static_cast<__half*>(kv.v)[slot * row + i] = __float2half_rn(v[t * row + i]);
  } else {
    static_cast<float*>(kv.k)[slot * row + i] = k[t * row + i];
    static_cast<float*>(kv.v)[slot * row + i] = v[t * row + i];
  }
}

unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535 * 8 ? (b > 0 ? b : 1) : 65535 * 8);
}

}  // namespace

void get_rows(const WeightView& table, const int32_t* ids, int64_t n, float* out, int* bad_id, cudaStream_t stream) {
  if (n <= 0 || table.cols <= 0) return;
  launch_kernel(get_rows_kernel, dim3(blocks_for(table.cols), static_cast<unsigned>(n)), kThreads, 0, stream, table, ids,
                out, bad_id);
  check_launch("get_rows");
}

void rmsnorm(const float* x, const float* weight, float* y, int64_t n_rows, int64_t n, float eps, cudaStream_t stream) {
  if (n_rows <= 0) return;
  // x is only read when there is no residual.
  launch_kernel(rmsnorm_kernel, static_cast<unsigned>(n_rows), norm_threads(n), 0, stream, const_cast<float*>(x),
                nullptr, weight, y, n, eps);
  check_launch("rmsnorm");
}

void add_rmsnorm(float* x, const float* residual, const float* weight, float* y, int64_t n_rows, int64_t n, float eps,
                 cudaStream_t stream) {
  if (n_rows <= 0) return;
  launch_kernel(rmsnorm_kernel, static_cast<unsigned>(n_rows), norm_threads(n), 0, stream, x, residual, weight, y, n,
                eps);
  check_launch("add_rmsnorm");
}

void rope(float* x, const int32_t* pos, int64_t n_tokens, int n_heads, int head_dim, const RopeParams& p,
          float theta_scale, cudaStream_t stream) {
  if (n_tokens <= 0 || n_heads <= 0) return;
  const int half = p.n_rot / 2;
  const dim3 grid((half + 63) / 64, static_cast<unsigned>(n_heads), static_cast<unsigned>(n_tokens));
  launch_kernel(rope_kernel, grid, 64, 0, stream, x, pos, n_heads, head_dim, half, p.freq_scale, theta_scale, p.neox);
  check_launch("rope");
}

void rope_kv_store(float* q, float* k, const float* v, const int32_t* pos, int64_t n_tokens, int n_heads,
                   const RopeParams& p, float theta_scale, const KvLayerView& kv, const AttnToken* toks,
                   cudaStream_t stream) {
  if (n_tokens <= 0) return;
  const int half = p.n_rot / 2;
  const int64_t items = (int64_t(n_heads) + kv.n_kv_heads) * half + int64_t(kv.n_kv_heads) * kv.head_dim;
  const dim3 grid(blocks_for(items), static_cast<unsigned>(n_tokens));
  if (kv.type == DType::F16)
    launch_kernel(rope_kv_store_kernel<__half>, grid, kThreads, 0, stream, q, k, v, pos, n_heads, half, p.freq_scale,
                  theta_scale, p.neox, kv, toks);
  else
    launch_kernel(rope_kv_store_kernel<float>, grid, kThreads, 0, stream, q, k, v, pos, n_heads, half, p.freq_scale,
                  theta_scale, p.neox, kv, toks);
  check_launch("rope_kv_store");
}

void silu_mul(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  launch_kernel(silu_mul_kernel, blocks_for(n), kThreads, 0, stream, gate, up, out, n);
  check_launch("silu_mul");
}

void gelu_mul(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  launch_kernel(gelu_mul_kernel, blocks_for(n), kThreads, 0, stream, gate, up, out, n);
  check_launch("gelu_mul");
}

void scale(float* x, float s, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  launch_kernel(scale_kernel, blocks_for(n), kThreads, 0, stream, x, s, n);
  check_launch("scale");
}

void softcap(float* x, float cap, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  launch_kernel(softcap_kernel, blocks_for(n), kThreads, 0, stream, x, cap, n);
  check_launch("softcap");
}

void add(float* y, const float* x, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  launch_kernel(add_kernel, blocks_for(n), kThreads, 0, stream, y, x, n);
  check_launch("add");
}

void add_rows(float* y, const float* x, int64_t n_rows, int64_t n, cudaStream_t stream) {
  if (n_rows <= 0 || n <= 0) return;
  launch_kernel(add_rows_kernel, blocks_for(n_rows * n), kThreads, 0, stream, y, x, n_rows, n);
  check_launch("add_rows");
}

void kv_store(const KvLayerView& kv, const AttnToken* toks, int64_t n_tokens, const float* k, const float* v,
              cudaStream_t stream) {
  if (n_tokens <= 0) return;
  const dim3 grid(blocks_for(int64_t(kv.n_kv_heads) * kv.head_dim), static_cast<unsigned>(n_tokens));
  if (kv.type == DType::F16)
    launch_kernel(kv_store_kernel<__half>, grid, kThreads, 0, stream, kv, toks, k, v);
  else
    launch_kernel(kv_store_kernel<float>, grid, kThreads, 0, stream, kv, toks, k, v);
  check_launch("kv_store");
}

}  // namespace inferd::kernels::cuda
