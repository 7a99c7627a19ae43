// Matmul on the GPU. Quantized weights (Q4_0, Q4_1, Q8_0) meet activations
// quantized to int8 blocks exactly as the CPU backend quantizes them, and each
// block's integer dot (dp4a) is scaled and summed in the CPU's formulation, so
// only the float summation order differs. Float weights (F32, F16, BF16) are
// converted on load and multiplied in float.
//
// Decode-sized steps (up to kGemvTokens tokens) run a GEMV: one warp per weight
// row, reading the row once for all tokens, which is what bounds decode (weight
// bytes over memory bandwidth); weights that share their input (q, k and v) run
// in one launch. Steps of up to kMmqTokens tokens (and large weights from 5
// tokens) run on the int8 tensor cores (mmq_tile), larger ones a tiled dp4a
// GEMM of 64 rows x 64 tokens per block through shared memory.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdlib>
#include <span>
#include <stdexcept>
#include <string_view>

#include "kernels/cuda/activation.cuh"
#include "kernels/cuda/cuda_ops.hpp"
#include "kernels/cuda/launch.cuh"
#include "kernels/quant_blocks.hpp"

namespace inferd::kernels::cuda {
namespace {

constexpr int kGemvTokens = 8;
constexpr int kGemvWarps = 4;  // warps per GEMV block

// A weight block unpacked for dp4a: its 32 values as int8 packed four to an int
// (element order), its scale d, and k, the factor of the activation block's
// correction c (Q4_1: m; Q4_0: d; Q8_0: none).
struct WBlock {
  int q[8];
  float d, k;
};

__device__ inline float half_bits(uint32_t h) { return __half2float(__ushort_as_half(static_cast<uint16_t>(h))); }

// Blocks are 2-byte aligned (Q4_0: 18 bytes, Q8_0: 34) or 4-byte aligned (Q4_1: 20).
template <class Block>
__device__ inline WBlock load_block(const uint8_t* row, int64_t b) {
  WBlock w;
  if constexpr (sizeof(Block) == sizeof(BlockQ4_1)) {
    const auto* u = reinterpret_cast<const uint32_t*>(row + b * sizeof(Block));
    const uint32_t dm = u[0];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      w.q[i] = static_cast<int>(u[1 + i] & 0x0f0f0f0fu);
      w.q[4 + i] = static_cast<int>((u[1 + i] >> 4) & 0x0f0f0f0fu);
    }
    w.d = half_bits(dm & 0xffffu);
    w.k = half_bits(dm >> 16);
  } else {
    const auto* u = reinterpret_cast<const uint16_t*>(row + b * sizeof(Block));
    w.d = half_bits(u[0]);
    if constexpr (sizeof(Block) == sizeof(BlockQ4_0)) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint32_t qs = uint32_t(u[1 + 2 * i]) | (uint32_t(u[2 + 2 * i]) << 16);
        w.q[i] = static_cast<int>(qs & 0x0f0f0f0fu);
        w.q[4 + i] = static_cast<int>((qs >> 4) & 0x0f0f0f0fu);
      }
      w.k = w.d;
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) w.q[i] = static_cast<int>(uint32_t(u[1 + 2 * i]) | (uint32_t(u[2 + 2 * i]) << 16));
      w.k = 0.0f;
    }
  }
  return w;
}

// 16 bytes from global to shared memory without passing through registers
// (sm_80+), and the wait for all of a thread's copies.
__device__ inline void copy_async_16(void* shared, const void* global) {
  const unsigned to = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(to), "l"(global) : "memory");
}
__device__ inline void copy_async_wait() { asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory"); }
__device__ inline void copy_async_8(void* shared, const void* global) {
  const unsigned to = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(to), "l"(global) : "memory");
}
// Closes this thread's group of copies; then waits until at most one group (the
// newest) is still in flight: a two-stage pipeline.
__device__ inline void copy_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ inline void copy_async_wait_all_but_newest() { asm volatile("cp.async.wait_group 1;\n" ::: "memory"); }

__device__ inline float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// One warp per (token, block of 32): the reference's activation quantization.
__global__ void quantize_act_kernel(DType weight, const float* x, int64_t total_blocks, int8_t* q, float2* dc) {
  grid_dependency();
  const int64_t blk = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (blk >= total_blocks) return;
  const float v = x[blk * 32 + lane];
  float amax = fabsf(v);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float d = __fdiv_rn(amax, 127.0f), id = amax != 0 ? __fdiv_rn(127.0f, amax) : 0.0f;
  const int qi = static_cast<int>(rintf(__fmul_rn(v, id)));
  q[blk * 32 + lane] = static_cast<int8_t>(qi);
  int sum = qi;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (lane != 0) return;
  const float d16 = __half2float(__float2half_rn(d));
  float c = 0.0f;
  if (weight == DType::Q4_1)
    c = __half2float(__float2half_rn(__fmul_rn(d, static_cast<float>(sum))));
  else if (weight == DType::Q4_0)
    c = __fmul_rn(__fmul_rn(-8.0f, d16), static_cast<float>(sum));
  dc[blk] = make_float2(d16, c);
}

// Token t's activation block b: its 32 int8 values and {d, c}.
struct ABlock {
  int4 lo, hi;
  float2 dc;
};

__device__ inline ABlock load_act(const int8_t* xq, const float2* xdc, int64_t nb, int t, int64_t b) {
  const auto* a = reinterpret_cast<const int4*>(xq + (t * nb + b) * 32);
  return ABlock{a[0], a[1], xdc[t * nb + b]};
}

// Activation block b of one token's floats x, quantized by one lane exactly as
// quantize_act_kernel does it with a warp (a maximum and an integer sum do not
// depend on the order they are taken in). x is 16-byte aligned.
template <class Block>
__device__ inline ABlock quantize_block(const float* x, int64_t b) {
  const auto* x4 = reinterpret_cast<const float4*>(x + b * 32);
  float v[32];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float4 f = x4[i];
    v[4 * i] = f.x, v[4 * i + 1] = f.y, v[4 * i + 2] = f.z, v[4 * i + 3] = f.w;
  }
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 32; ++i) amax = fmaxf(amax, fabsf(v[i]));
  const float d = __fdiv_rn(amax, 127.0f), id = amax != 0 ? __fdiv_rn(127.0f, amax) : 0.0f;
  int q[8], sum = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    uint32_t packed = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int qi = static_cast<int>(rintf(__fmul_rn(v[4 * i + k], id)));
      sum += qi;
      packed |= (static_cast<uint32_t>(qi) & 0xffu) << (8 * k);
    }
    q[i] = static_cast<int>(packed);
  }
  const float d16 = __half2float(__float2half_rn(d));
  float c = 0.0f;
  if constexpr (sizeof(Block) == sizeof(BlockQ4_1))
    c = __half2float(__float2half_rn(__fmul_rn(d, static_cast<float>(sum))));
  else if constexpr (sizeof(Block) == sizeof(BlockQ4_0))
    c = __fmul_rn(__fmul_rn(-8.0f, d16), static_cast<float>(sum));
  return ABlock{make_int4(q[0], q[1], q[2], q[3]), make_int4(q[4], q[5], q[6], q[7]), make_float2(d16, c)};
}

__device__ inline int block_dot(const WBlock& w, const ABlock& a) {
  int s = __dp4a(w.q[0], a.lo.x, 0);
  s = __dp4a(w.q[1], a.lo.y, s);
  s = __dp4a(w.q[2], a.lo.z, s);
  s = __dp4a(w.q[3], a.lo.w, s);
  s = __dp4a(w.q[4], a.hi.x, s);
  s = __dp4a(w.q[5], a.hi.y, s);
  s = __dp4a(w.q[6], a.hi.z, s);
  return __dp4a(w.q[7], a.hi.w, s);
}

// One weight block times one activation block, added to a row's sum and correction.
__device__ inline void accumulate(const WBlock& w, const ABlock& a, float& sum, float& corr) {
  sum += static_cast<float>(block_dot(w, a)) * (w.d * a.dc.x);
  corr += w.k * a.dc.y;
}

// A block takes kGemvRows rows, so each activation block loaded serves all of
// them, and its warps split the rows' blocks in stages of kStageBlocks: a warp
// has one stage of each row in flight, and a row of up to kGemvWarps stages
// (8192 columns) takes one memory round trip. Weight blocks (18, 20 or 34
// bytes, only 2- or 4-byte aligned) are not read block by block: the warp
// copies its stage of each row into shared memory with whole-warp 16-byte
// loads from the 16-byte boundary at or before it (every such word holding a
// byte of the row lies inside the row's allocation, which the backend rounds
// to 256 bytes), and each lane then reads its blocks from there.
constexpr int kGemvRows = 2;
constexpr int kStageBlocks = 64;  // two per lane

// Up to kMaxSegs weights of one type and row length read the same activations
// in one launch (q, k and v; gate and up): each takes a run of the grid's blocks.
constexpr int kMaxSegs = 3;

// 16-byte words of shared memory a warp's stage of one row takes: the stage's
// blocks and up to 15 bytes before them, to the 16-byte boundary.
template <class Block>
__host__ __device__ constexpr int stage_words() {
  return (kStageBlocks * int(sizeof(Block)) + 15 + 15) / 16;
}
struct GemvSeg {
  const uint8_t* w;
  size_t row_stride;
  int64_t rows;
  float* y;
  unsigned first_block;
};
struct GemvSegs {
  GemvSeg s[kMaxSegs];
  int n;
};

// The two fusions of a one-token step (Fuse below): QX, the block quantizes
// the activations it reads from the floats xf (no quantize_act launch before
// it); SWIGLU, segments 0 and 1 are gate and up of the same rows, a block takes
// ROWS / 2 rows of each and writes silu(gate) * up into segment 0's y (no
// silu_mul launch after it; segment 1's y is not written).
template <class Block, int NT, int ROWS, bool QX = false, bool SWIGLU = false>
__global__ __launch_bounds__(32 * kGemvWarps) void gemv_quant(GemvSegs segs, int64_t nb, const int8_t* xq,
                                                              const float2* xdc, const float* xf, int n_tokens) {
  static_assert(!(QX || SWIGLU) || NT == 1, "the fusions are for one token");
  grid_launch_dependents();
  // This block's segment, chosen by copies (an index into segs would put the
  // parameter in local memory: 128 bytes of stack and 123 registers a thread for
  // one token and 8 rows, against 71 without).
  GemvSeg seg = segs.s[0];
#pragma unroll
  for (int i = 1; i < kMaxSegs; ++i)
    if (!SWIGLU && i < segs.n && blockIdx.x >= segs.s[i].first_block) seg = segs.s[i];
  const int64_t rows = seg.rows;
  float* const y = seg.y;
  constexpr int kHalf = ROWS / 2;  // SWIGLU: rows of gate (and of up) a block takes
  constexpr int kSize = sizeof(Block);
  constexpr int kWords = stage_words<Block>();
  constexpr int kLoads = (kWords + 31) / 32;
  extern __shared__ uint4 stage_mem[];  // [n_warps][ROWS][kWords], sized at launch
  __shared__ float partial[kGemvWarps][ROWS][NT];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
  const int64_t r0 = int64_t(blockIdx.x - seg.first_block) * (SWIGLU ? kHalf : ROWS);
  const uint8_t* row[ROWS];
#pragma unroll
  for (int i = 0; i < ROWS; ++i) {  // a missing row reads the last
    if constexpr (SWIGLU) row[i] = segs.s[i / kHalf].w + min(r0 + i % kHalf, rows - 1) * segs.s[i / kHalf].row_stride;
    else row[i] = seg.w + min(r0 + i, rows - 1) * seg.row_stride;
  }
  // A stage goes straight from global to shared memory (cp.async), not through
  // registers: holding every row's words in registers took 135 a thread on an
  // H100, which left room for three blocks an SM (19 % occupancy). head[i]: the
  // stage's offset in row i's first 16-byte word.
  int head[ROWS];
  auto stage = [&](int64_t b_start) {
    const int n_blocks = static_cast<int>(min(int64_t(kStageBlocks), nb - b_start));
#pragma unroll
    for (int i = 0; i < ROWS; ++i) {
      const uintptr_t first = reinterpret_cast<uintptr_t>(row[i] + b_start * kSize);
      const auto* aligned = reinterpret_cast<const uint4*>(first & ~uintptr_t(15));
      head[i] = static_cast<int>(first & 15);
      const int words = (head[i] + n_blocks * kSize + 15) / 16;
#pragma unroll
      for (int k = 0; k < kLoads; ++k)
        if (lane + 32 * k < words)
          copy_async_16(stage_mem + (warp * ROWS + i) * kWords + lane + 32 * k, aligned + lane + 32 * k);
    }
  };
  // The first stage's weights are requested before waiting for the kernel
  // before this one (nothing writes weights), so that round trip overlaps it.
  if (int64_t(warp) * kStageBlocks < nb) stage(int64_t(warp) * kStageBlocks);
  grid_wait();
  float sum[ROWS][NT], corr[ROWS][NT];
#pragma unroll
  for (int i = 0; i < ROWS; ++i)
#pragma unroll
    for (int t = 0; t < NT; ++t) sum[i][t] = corr[i][t] = 0.0f;
  // Decode (NT <= 2): the lane's activation blocks are loaded with the weights,
  // not after them, so the two memory round trips overlap.
  constexpr bool kPrefetch = NT <= 2;
  for (int64_t b_start = int64_t(warp) * kStageBlocks; b_start < nb; b_start += n_warps * kStageBlocks) {
    const int n_blocks = static_cast<int>(min(int64_t(kStageBlocks), nb - b_start));
    ABlock pre[2][kPrefetch ? NT : 1];
    if constexpr (kPrefetch) {
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int t = 0; t < NT; ++t)
          if (lane + 32 * h < n_blocks && t < n_tokens) {
            if constexpr (QX) pre[h][t] = quantize_block<Block>(xf, b_start + lane + 32 * h);
            else pre[h][t] = load_act(xq, xdc, nb, t, b_start + lane + 32 * h);
          }
    }
    copy_async_wait();
    __syncwarp();
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // kStageBlocks = 64: two blocks per lane
      const int j = lane + 32 * h;
      if (j >= n_blocks) break;
      const auto* staged = reinterpret_cast<const uint8_t*>(stage_mem + warp * ROWS * kWords);
      if constexpr (kPrefetch) {
        // The activations are in registers already: one row's unpacked block
        // live at a time, for the same reason as above.
#pragma unroll
        for (int i = 0; i < ROWS; ++i) {
          const WBlock wb = load_block<Block>(staged + i * kWords * 16 + head[i], j);
#pragma unroll
          for (int t = 0; t < NT; ++t)
            if (t < n_tokens) accumulate(wb, pre[h][t], sum[i][t], corr[i][t]);
        }
      } else {
        // Up to 8 tokens: each token's activation block is loaded once for all rows.
        WBlock wb[ROWS];
#pragma unroll
        for (int i = 0; i < ROWS; ++i) wb[i] = load_block<Block>(staged + i * kWords * 16 + head[i], j);
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          if (t < n_tokens) {
            const ABlock a = load_act(xq, xdc, nb, t, b_start + j);
#pragma unroll
            for (int i = 0; i < ROWS; ++i) accumulate(wb[i], a, sum[i][t], corr[i][t]);
          }
        }
      }
    }
    __syncwarp();  // the warp is done with its stage before the next overwrites it
    if (b_start + n_warps * kStageBlocks < nb) stage(b_start + n_warps * kStageBlocks);
  }
#pragma unroll
  for (int i = 0; i < ROWS; ++i)
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const float s = warp_sum(sum[i][t]) + warp_sum(corr[i][t]);
      if (lane == 0) partial[warp][i][t] = s;
    }
  __syncthreads();
  if constexpr (SWIGLU) {
    if (threadIdx.x < kHalf && r0 + threadIdx.x < rows) {
      float g = 0.0f, u = 0.0f;
#pragma unroll
      for (int k = 0; k < n_warps; ++k) g += partial[k][threadIdx.x][0], u += partial[k][kHalf + threadIdx.x][0];
      y[r0 + threadIdx.x] = silu_times(g, u);
    }
    return;
  }
  if (threadIdx.x < ROWS * NT) {
    const int i = threadIdx.x / NT, t = threadIdx.x % NT;
    if (t < n_tokens && r0 + i < rows) {
      float s = 0.0f;
#pragma unroll
      for (int k = 0; k < n_warps; ++k) s += partial[k][i][t];
      y[t * rows + r0 + i] = s;
    }
  }
}

// Tiled GEMM over quantized weights: a block computes 64 rows x 64 tokens, each
// thread 4 x 4 of them (rows tr + 16 i, tokens tc + 16 j), kTileBlocks weight
// blocks (128 columns) per step through shared memory.
constexpr int kTile = 64;
constexpr int kTileBlocks = 4;
constexpr int kLdq = kTileBlocks * 8 + 1;  // ints per shared row, padded against bank conflicts

template <class Block>
__global__ __launch_bounds__(256) void gemm_quant(const uint8_t* w, size_t row_stride, int64_t rows, int64_t nb,
                                                  const int8_t* xq, const float2* xdc, int64_t n_tokens, float* y) {
  grid_dependency();
  __shared__ int wq[kTile][kLdq];
  __shared__ float wd[kTile][kTileBlocks], wk[kTile][kTileBlocks];
  __shared__ int aq[kTile][kLdq];
  __shared__ float2 adc[kTile][kTileBlocks];
  const int tid = threadIdx.x, tr = tid / 16, tc = tid % 16;
  const int64_t r0 = int64_t(blockIdx.x) * kTile, t0 = int64_t(blockIdx.y) * kTile;
  float sum[4][4] = {}, corr[4][4] = {};
  // Each thread loads one weight block and one activation block per step.
  const int lr = tid / kTileBlocks, kb_load = tid % kTileBlocks;
  for (int64_t b0 = 0; b0 < nb; b0 += kTileBlocks) {
    const int64_t b = b0 + kb_load;
    {
      WBlock wb{};
      if (r0 + lr < rows && b < nb) wb = load_block<Block>(w + (r0 + lr) * row_stride, b);
#pragma unroll
      for (int i = 0; i < 8; ++i) wq[lr][kb_load * 8 + i] = wb.q[i];
      wd[lr][kb_load] = wb.d;
      wk[lr][kb_load] = wb.k;
    }
    {
      int4 a0{}, a1{};
      float2 dc{0.0f, 0.0f};
      if (t0 + lr < n_tokens && b < nb) {
        const auto* a = reinterpret_cast<const int4*>(xq + ((t0 + lr) * nb + b) * 32);
        a0 = a[0];
        a1 = a[1];
        dc = xdc[(t0 + lr) * nb + b];
      }
      int* dst = &aq[lr][kb_load * 8];
      dst[0] = a0.x, dst[1] = a0.y, dst[2] = a0.z, dst[3] = a0.w;
      dst[4] = a1.x, dst[5] = a1.y, dst[6] = a1.z, dst[7] = a1.w;
      adc[lr][kb_load] = dc;
    }
    __syncthreads();
#pragma unroll
    for (int kb = 0; kb < kTileBlocks; ++kb) {
      int idot[4][4] = {};
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        int wv[4], av[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) wv[i] = wq[tr + 16 * i][kb * 8 + k];
#pragma unroll
        for (int j = 0; j < 4; ++j) av[j] = aq[tc + 16 * j][kb * 8 + k];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) idot[i][j] = __dp4a(wv[i], av[j], idot[i][j]);
      }
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float2 dc = adc[tc + 16 * j][kb];
          sum[i][j] += static_cast<float>(idot[i][j]) * (wd[tr + 16 * i][kb] * dc.x);
          corr[i][j] += wk[tr + 16 * i][kb] * dc.y;
        }
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t r = r0 + tr + 16 * i, t = t0 + tc + 16 * j;
      if (r < rows && t < n_tokens) y[t * rows + r] = sum[i][j] + corr[i][j];
    }
}

// Steps of 9 to 64 tokens (decode of many sequences, short prefill chunks) run
// on the int8 tensor cores: one mma (m16n8k32, s8 x s8 -> s32) multiplies a
// 32-element block of 16 weight rows by 8 tokens, so the weights are read once,
// as their quantized bytes, for all the step's tokens, and each block's integer
// dot is scaled exactly as the GEMV scales it.
//
// Fragments (PTX ISA, mma.m16n8k32 with 8-bit operands; g = lane / 4, c = lane % 4):
// A (16 x 32, rows): a0 = row g, elements 4c..4c+3; a1 = row g+8, the same;
//   a2, a3 = the same rows, elements 16+4c..16+4c+3.
// B (32 x 8, columns): b0 = token g, elements 4c..4c+3; b1 = elements 16+4c...
// D (16 x 8): d0, d1 = row g, tokens 2c and 2c+1; d2, d3 = row g+8.
// In a 4-bit block, byte j holds element j (low nibble) and j+16 (high), so
// one 4-byte load gives a lane both a0 and a2 of its row.

__device__ inline void mma_s8(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm(  // not volatile: it has no side effect, so the compiler may schedule it
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Lane c's part of block b of one row: elements 4c..4c+3 (lo) and 16+4c.. (hi)
// as int8, the block's scale d and k, the factor of the activations' c.
struct MmqRow {
  uint32_t lo, hi;
  float d, k;
};

template <class Block>
__device__ inline MmqRow load_mmq_row(const uint8_t* row, int64_t b, int c) {
  const uint8_t* blk = row + b * sizeof(Block);
  MmqRow r;
  if constexpr (sizeof(Block) == sizeof(BlockQ4_1)) {  // 4-byte aligned: d, m, qs[16]
    const uint32_t dm = *reinterpret_cast<const uint32_t*>(blk);
    const uint32_t u = reinterpret_cast<const uint32_t*>(blk + 4)[c];
    r.lo = u & 0x0f0f0f0fu, r.hi = (u >> 4) & 0x0f0f0f0fu;
    r.d = half_bits(dm & 0xffffu), r.k = half_bits(dm >> 16);
  } else {  // 2-byte aligned: d, qs
    const auto* h = reinterpret_cast<const uint16_t*>(blk);
    r.d = half_bits(h[0]);
    if constexpr (sizeof(Block) == sizeof(BlockQ4_0)) {
      const uint32_t u = uint32_t(h[1 + 2 * c]) | (uint32_t(h[2 + 2 * c]) << 16);
      r.lo = u & 0x0f0f0f0fu, r.hi = (u >> 4) & 0x0f0f0f0fu;
      r.k = r.d;
    } else {
      r.lo = uint32_t(h[1 + 2 * c]) | (uint32_t(h[2 + 2 * c]) << 16);
      r.hi = uint32_t(h[9 + 2 * c]) | (uint32_t(h[10 + 2 * c]) << 16);
      r.k = 0.0f;
    }
  }
  return r;
}

// One block's integer dot for a row and a token, scaled and added to acc, with
// its offset term: the fewest instructions per type.
template <class Block>
__device__ inline float mmq_scaled(float acc, int dot, const MmqRow& r, float2 sc) {
  if constexpr (sizeof(Block) == sizeof(BlockQ8_0)) return fmaf(static_cast<float>(dot), r.d * sc.x, acc);
  else if constexpr (sizeof(Block) == sizeof(BlockQ4_0)) return fmaf(r.d, fmaf(static_cast<float>(dot), sc.x, sc.y), acc);
  else return fmaf(static_cast<float>(dot), r.d * sc.x, fmaf(r.k, sc.y, acc));
}

// A block takes 32 rows and every token, so each stage of activations it reads
// from L2 serves 32 rows (about twice the stage's weight bytes at 32 tokens;
// with 16 rows a block it was four times). Weights and activations go to shared
// memory by cp.async in stages of KC blocks, the next stage in flight while the
// warps multiply the current one. Warp w takes rows 16 (w % 2) .. +15 of the
// block, every token tile (so one unpacked weight fragment serves NT mma: with
// half the tiles a warp, an H100 issued 83 instructions an mma at 32 tokens)
// and every (2 SPLIT)-th block of a stage (w / 2). SPLIT is 4 where the grid has fewer than two blocks an SM
// (4096 rows: 128 blocks), whose four warps alone could not hide the latency
// of the shared-memory loads and tensor-core ops; 1 where there are blocks
// enough (on an H100, 14336 rows ran faster so). The parts' sums are added in
// a fixed order, so results do not depend on timing. Weight
// rows are copied in 16-byte words from the boundary at or before them, as the
// GEMV stages them (the backend rounds each weight allocation to 256 bytes).
constexpr int kTileRows = 32;
constexpr int kMmqTokens = 64;

template <class Block, int KC>
__host__ __device__ constexpr int tile_row_words() {
  static_assert(KC * sizeof(Block) % 16 == 0, "a stage of a row must keep the row's offset in its first word");
  return KC * int(sizeof(Block)) / 16 + 1;  // + the head before the row's first block
}
template <int KC>
__host__ __device__ constexpr int tile_act_pitch() {
  return KC * 32 + 16;  // bytes a token takes; the padding keeps the 8 tokens of a fragment in distinct banks
}
template <class Block, int NT, int KC>
__host__ __device__ constexpr int tile_stage_bytes() {
  return kTileRows * tile_row_words<Block, KC>() * 16 + NT * 8 * tile_act_pitch<KC>() + NT * 8 * KC * 8;
}

template <class Block, int NT, int KC, int SPLIT>
__global__ __launch_bounds__(128 * SPLIT) void mmq_tile(const uint8_t* w, size_t row_stride, int64_t rows, int64_t nb,
                                                const int8_t* xq, const float2* xdc, int n_tokens, float* y) {
  grid_launch_dependents();
  constexpr int kSize = sizeof(Block), kWords = tile_row_words<Block, KC>(), kPitch = tile_act_pitch<KC>();
  constexpr int kWBytes = kTileRows * kWords * 16, kXBytes = NT * 8 * kPitch;
  constexpr int kStage = tile_stage_bytes<Block, NT, KC>(), kTileThreads = 128 * SPLIT;
  extern __shared__ uint4 tile_mem[];
  auto* const smem = reinterpret_cast<uint8_t*>(tile_mem);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, c = lane % 4;
  const int64_t r0 = int64_t(blockIdx.x) * kTileRows;
  const int64_t n_chunks = (nb + KC - 1) / KC;
  auto row_at = [&](int i) { return w + min(r0 + i, rows - 1) * row_stride; };  // a missing row reads the last
  auto stage_weights = [&](int64_t ch, int s) {
    const int n_blocks = static_cast<int>(min(int64_t(KC), nb - ch * KC));
    uint8_t* dst = smem + s * kStage;
    for (int e = tid; e < kTileRows * kWords; e += kTileThreads) {
      const int i = e / kWords, k = e % kWords;
      const uintptr_t first = reinterpret_cast<uintptr_t>(row_at(i) + ch * KC * kSize);
      if (k < (int(first & 15) + n_blocks * kSize + 15) / 16)
        copy_async_16(dst + (i * kWords + k) * 16, reinterpret_cast<const uint4*>(first & ~uintptr_t(15)) + k);
    }
  };
  auto stage_acts = [&](int64_t ch, int s) {
    const int n_blocks = static_cast<int>(min(int64_t(KC), nb - ch * KC));
    uint8_t* dx = smem + s * kStage + kWBytes;
    uint8_t* ds = dx + kXBytes;
    for (int e = tid; e < NT * 8 * KC * 2; e += kTileThreads) {  // two 16-byte words a block
      const int t = e / (KC * 2), k = e % (KC * 2);
      if (t < n_tokens && k < n_blocks * 2) copy_async_16(dx + t * kPitch + k * 16, xq + (t * nb + ch * KC) * 32 + k * 16);
    }
    for (int e = tid; e < NT * 8 * KC; e += kTileThreads) {  // by block, then token: a lane's two tokens in one load
      const int t = e / KC, k = e % KC;
      if (t < n_tokens && k < n_blocks) copy_async_8(ds + (k * NT * 8 + t) * 8, xdc + t * nb + ch * KC + k);
    }
  };
  // Tokens past n_tokens read zero activations and scales in both stages (the
  // copies never write their rows), so the loop below needs no bounds checks.
  if (n_tokens < NT * 8)
    for (int s = 0; s < 2; ++s) {
      uint8_t* dx = smem + s * kStage + kWBytes;
      auto* ds = reinterpret_cast<float2*>(dx + kXBytes);
      for (int e = tid; e < (NT * 8 - n_tokens) * KC * 2; e += kTileThreads)
        reinterpret_cast<uint4*>(dx + (n_tokens + e / (KC * 2)) * kPitch)[e % (KC * 2)] = make_uint4(0, 0, 0, 0);
      for (int e = tid; e < (NT * 8 - n_tokens) * KC; e += kTileThreads)
        ds[(e % KC) * NT * 8 + n_tokens + e / KC] = make_float2(0.0f, 0.0f);
    }
  // The first stage's weights are requested before waiting for the kernel
  // before this one (nothing writes weights); its activations after.
  stage_weights(0, 0);
  grid_wait();
  stage_acts(0, 0);
  copy_async_commit();
  // Each warp takes 16 rows and every token tile, so that the weight fragment
  // it unpacks for a block serves NT mma; the warps of a row group split the
  // stage's blocks between them (kParts parts in all).
  constexpr int kTiles = NT, kParts = 2 * SPLIT;
  const int rg = (warp % 2) * 16, part = warp / 2;
  const int head_lo = static_cast<int>(reinterpret_cast<uintptr_t>(row_at(rg + g)) & 15);
  const int head_hi = static_cast<int>(reinterpret_cast<uintptr_t>(row_at(rg + g + 8)) & 15);
  float acc[kTiles][4];
#pragma unroll
  for (int u = 0; u < kTiles; ++u) acc[u][0] = acc[u][1] = acc[u][2] = acc[u][3] = 0.0f;
  for (int64_t ch = 0; ch < n_chunks; ++ch) {
    const int s = static_cast<int>(ch & 1);
    if (ch + 1 < n_chunks) {
      stage_weights(ch + 1, s ^ 1);
      stage_acts(ch + 1, s ^ 1);
    }
    copy_async_commit();
    copy_async_wait_all_but_newest();
    __syncthreads();
    const uint8_t* ws = smem + s * kStage;
    const uint8_t* xs = ws + kWBytes;
    const auto* ss = reinterpret_cast<const float4*>(xs + kXBytes);  // [block][token pair]: {d, c} of tokens 2i, 2i+1
    const uint8_t* w_lo = ws + (rg + g) * kWords * 16 + head_lo;
    const uint8_t* w_hi = ws + (rg + g + 8) * kWords * 16 + head_hi;
    const int n_blocks = static_cast<int>(min(int64_t(KC), nb - ch * KC));
    // A stage's block j: the warp's 16 rows times every token tile. The tiles'
    // fragments are loaded and their mma issued before any result is scaled,
    // so the mma and the shared-memory loads overlap (one mma at a time, each
    // scaled before the next, left the warp waiting on each in turn).
    auto block = [&](int j) {
      const MmqRow lo = load_mmq_row<Block>(w_lo, j, c), hi = load_mmq_row<Block>(w_hi, j, c);
      const uint32_t a[4] = {lo.lo, hi.lo, lo.hi, hi.hi};
      int d[kTiles][4];
#pragma unroll
      for (int u = 0; u < kTiles; ++u) {
        const auto* q = reinterpret_cast<const uint32_t*>(xs + (u * 8 + g) * kPitch + j * 32);
        d[u][0] = d[u][1] = d[u][2] = d[u][3] = 0;
        mma_s8(d[u], a, q[c], q[4 + c]);
      }
#pragma unroll
      for (int u = 0; u < kTiles; ++u) {
        const float4 sc = ss[(j * NT * 8 + u * 8 + 2 * c) / 2];
        const float2 s0 = make_float2(sc.x, sc.y), s1 = make_float2(sc.z, sc.w);
        acc[u][0] = mmq_scaled<Block>(acc[u][0], d[u][0], lo, s0);
        acc[u][1] = mmq_scaled<Block>(acc[u][1], d[u][1], lo, s1);
        acc[u][2] = mmq_scaled<Block>(acc[u][2], d[u][2], hi, s0);
        acc[u][3] = mmq_scaled<Block>(acc[u][3], d[u][3], hi, s1);
      }
    };
    if (n_blocks == KC) {  // every stage but maybe the last: unrolled, addresses fold into offsets
#pragma unroll
      for (int j = 0; j < KC; j += kParts) block(j + part);
    } else {
      for (int j = part; j < n_blocks; j += kParts) block(j);
    }
    __syncthreads();  // every warp is done with stage s before the next round's copies refill it
  }
  // Parts 1.. leave their sums in the (now free) stage memory; part 0 adds them in order.
  auto* partial = reinterpret_cast<float*>(smem) + (warp % 2) * (kParts - 1) * kTiles * 4 * 32;
  if (part > 0) {
#pragma unroll
    for (int u = 0; u < kTiles; ++u)
#pragma unroll
      for (int i = 0; i < 4; ++i) partial[((part - 1) * kTiles * 4 + u * 4 + i) * 32 + lane] = acc[u][i];
  }
  __syncthreads();
  if (part > 0) return;
  for (int k = 1; k < kParts; ++k)
#pragma unroll
    for (int u = 0; u < kTiles; ++u)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[u][i] += partial[((k - 1) * kTiles * 4 + u * 4 + i) * 32 + lane];
#pragma unroll
  for (int u = 0; u < kTiles; ++u) {
    const int t0 = u * 8 + 2 * c;
    const int64_t r = r0 + rg + g;
    if (r < rows) {
      if (t0 < n_tokens) y[int64_t(t0) * rows + r] = acc[u][0];
      if (t0 + 1 < n_tokens) y[int64_t(t0 + 1) * rows + r] = acc[u][1];
    }
    if (r + 8 < rows) {
      if (t0 < n_tokens) y[int64_t(t0) * rows + r + 8] = acc[u][2];
      if (t0 + 1 < n_tokens) y[int64_t(t0 + 1) * rows + r + 8] = acc[u][3];
    }
  }
}

// Launches mmq_tile for NT tiles of 8 tokens; stages of 16 blocks where two
// fit the default 48 KB of shared memory a block, else 8 and the opt-in.
template <class Block, int NT, int SPLIT>
void launch_mmq_tile(const MatmulOut& o, int64_t nb, QuantAct x, int n, cudaStream_t stream) {
  constexpr int KC = NT <= 4 ? 16 : 8;
  constexpr int partial_bytes = 2 * (2 * SPLIT - 1) * NT * 4 * 32 * 4;  // the parts' sums, after the stages
  constexpr int smem = std::max(2 * tile_stage_bytes<Block, NT, KC>(), partial_bytes);
  auto* kernel = mmq_tile<Block, NT, KC, SPLIT>;
  static const bool sized = [&] {
    if constexpr (smem > 48 * 1024) cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    return true;
  }();
  (void)sized;
  launch_kernel(kernel, static_cast<unsigned>((o.w.rows + kTileRows - 1) / kTileRows), 128 * SPLIT, smem, stream,
                static_cast<const uint8_t*>(o.w.data), o.w.row_stride, o.w.rows, nb, x.q, x.dc, n, o.y);
}

template <class Block, int NT>
void launch_mmq_tile(const MatmulOut& o, int64_t nb, QuantAct x, int n, int sm_count, cudaStream_t stream) {
  if ((o.w.rows + kTileRows - 1) / kTileRows < 2 * int64_t(sm_count)) launch_mmq_tile<Block, NT, 4>(o, nb, x, n, stream);
  else launch_mmq_tile<Block, NT, 1>(o, nb, x, n, stream);
}

// Float weights: element loads by type.
template <DType T>
__device__ inline float load_w(const uint8_t* row, int64_t c) {
  if constexpr (T == DType::F32) return reinterpret_cast<const float*>(row)[c];
  if constexpr (T == DType::F16) return __half2float(reinterpret_cast<const __half*>(row)[c]);
  return __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(row)[c]);
}

// Eight consecutive weights from a 16-byte aligned address.
template <DType T>
__device__ inline void load_w8(const uint8_t* row, int64_t c, float (&v)[8]) {
  if constexpr (T == DType::F32) {
    const float4 a = reinterpret_cast<const float4*>(row)[c / 4], b = reinterpret_cast<const float4*>(row)[c / 4 + 1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else {
    const uint4 u = *reinterpret_cast<const uint4*>(row + c * 2);
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if constexpr (T == DType::F16) {
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
        v[2 * i] = f.x, v[2 * i + 1] = f.y;
      } else {
        v[2 * i] = __uint_as_float(w[i] << 16);
        v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
      }
    }
  }
}

// A warp takes kGemvRows rows, as the quantized GEMV does. `vec`: rows, x and
// cols allow 16-byte weight loads of 8 values.
template <DType T, int NT>
__global__ __launch_bounds__(32 * kGemvWarps) void gemv_float(const uint8_t* w, size_t row_stride, int64_t rows,
                                                              int64_t cols, const float* x, int n_tokens, float* y,
                                                              bool vec) {
  grid_dependency();
  const int lane = threadIdx.x % 32;
  const int64_t r0 = (int64_t(blockIdx.x) * kGemvWarps + threadIdx.x / 32) * kGemvRows;
  if (r0 >= rows) return;
  const uint8_t* row[kGemvRows];
#pragma unroll
  for (int i = 0; i < kGemvRows; ++i) row[i] = w + min(r0 + i, rows - 1) * row_stride;
  float sum[kGemvRows][NT];
#pragma unroll
  for (int i = 0; i < kGemvRows; ++i)
#pragma unroll
    for (int t = 0; t < NT; ++t) sum[i][t] = 0.0f;
  if (vec) {
    for (int64_t c = int64_t(lane) * 8; c < cols; c += 32 * 8) {
      float wv[kGemvRows][8];
#pragma unroll
      for (int i = 0; i < kGemvRows; ++i) load_w8<T>(row[i], c, wv[i]);
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        if (t < n_tokens) {
          const float4 a = *reinterpret_cast<const float4*>(x + t * cols + c);
          const float4 b = *reinterpret_cast<const float4*>(x + t * cols + c + 4);
#pragma unroll
          for (int i = 0; i < kGemvRows; ++i)
            sum[i][t] += wv[i][0] * a.x + wv[i][1] * a.y + wv[i][2] * a.z + wv[i][3] * a.w + wv[i][4] * b.x +
                         wv[i][5] * b.y + wv[i][6] * b.z + wv[i][7] * b.w;
        }
      }
    }
  } else {
    for (int64_t c = lane; c < cols; c += 32) {
      float wv[kGemvRows];
#pragma unroll
      for (int i = 0; i < kGemvRows; ++i) wv[i] = load_w<T>(row[i], c);
#pragma unroll
      for (int t = 0; t < NT; ++t)
        if (t < n_tokens) {
          const float xv = x[t * cols + c];
#pragma unroll
          for (int i = 0; i < kGemvRows; ++i) sum[i][t] += wv[i] * xv;
        }
    }
  }
#pragma unroll
  for (int i = 0; i < kGemvRows; ++i)
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      if (t < n_tokens) {
        const float s = warp_sum(sum[i][t]);
        if (lane == 0 && r0 + i < rows) y[t * rows + r0 + i] = s;
      }
    }
}

// Tiled float GEMM: 64 rows x 64 tokens per block, 16 columns per step.
constexpr int kTileK = 16;

template <DType T>
__global__ __launch_bounds__(256) void gemm_float(const uint8_t* w, size_t row_stride, int64_t rows, int64_t cols,
                                                  const float* x, int64_t n_tokens, float* y) {
  grid_dependency();
  __shared__ float ws[kTileK][kTile + 1];
  __shared__ float xs[kTileK][kTile + 1];
  const int tid = threadIdx.x, tr = tid / 16, tc = tid % 16;
  const int64_t r0 = int64_t(blockIdx.x) * kTile, t0 = int64_t(blockIdx.y) * kTile;
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < cols; k0 += kTileK) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int e = tid + 256 * i, l = e / kTileK, kk = e % kTileK;
      const int64_t c = k0 + kk;
      ws[kk][l] = (r0 + l < rows && c < cols) ? load_w<T>(w + (r0 + l) * row_stride, c) : 0.0f;
      xs[kk][l] = (t0 + l < n_tokens && c < cols) ? x[(t0 + l) * cols + c] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kTileK; ++kk) {
      float wv[4], xv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) wv[i] = ws[kk][tr + 16 * i];
#pragma unroll
      for (int j = 0; j < 4; ++j) xv[j] = xs[kk][tc + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += wv[i] * xv[j];
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t r = r0 + tr + 16 * i, t = t0 + tc + 16 * j;
      if (r < rows && t < n_tokens) y[t * rows + r] = acc[i][j];
    }
}

// Whether environment variable `name` is set to `value`: the switches that put
// back an earlier kernel choice, for comparing the two on one build.
bool env_is(const char* name, std::string_view value) {
  const char* e = std::getenv(name);
  return e != nullptr && std::string_view(e) == value;
}

// Warps of a quantized GEMV block: one per stage of a row, up to kGemvWarps. A
// row of 4096 columns (128 blocks) has two stages, and the two other warps of a
// block of four would wait idle while taking the block's share of an SM.
// INFERD_CUDA_GEMV_WARPS=4 always takes four, to compare.
int gemv_warps(int64_t nb) {
  static const bool always_all = env_is("INFERD_CUDA_GEMV_WARPS", "4");
  if (always_all) return kGemvWarps;
  return static_cast<int>(std::clamp<int64_t>((nb + kStageBlocks - 1) / kStageBlocks, 1, kGemvWarps));
}

// INFERD_CUDA_MMQ=0 sends 9 to 64 tokens to the dp4a tile instead, to compare.
bool mmq_enabled() {
  static const bool on = !env_is("INFERD_CUDA_MMQ", "0");
  return on;
}

// Rows a one-token GEMV block takes, at most (fewer where the stages would not
// fit 48 KB of shared memory). INFERD_CUDA_GEMV_ROWS=2, 4 or 16 takes that
// many instead of 8, to compare.
int gemv_decode_rows() {
  static const int rows = env_is("INFERD_CUDA_GEMV_ROWS", "2")    ? kGemvRows
                          : env_is("INFERD_CUDA_GEMV_ROWS", "4")  ? 4
                          : env_is("INFERD_CUDA_GEMV_ROWS", "16") ? 16
                                                                  : 8;
  return rows;
}

unsigned gemv_blocks(int64_t rows) {
  constexpr int64_t rows_per_block = int64_t(kGemvWarps) * kGemvRows;
  return static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block);
}
dim3 gemm_grid(int64_t rows, int64_t n_tokens) {
  return dim3(static_cast<unsigned>((rows + kTile - 1) / kTile), static_cast<unsigned>((n_tokens + kTile - 1) / kTile));
}

template <class Block>
void matmul_quant_typed(std::span<const MatmulOut> outs, QuantAct x, int64_t n_tokens, int sm_count, Fuse fuse,
                        cudaStream_t stream) {
  const int64_t nb = outs.front().w.cols / kQuantBlock;
  const int n = static_cast<int>(n_tokens);
  // From 5 tokens on, a weight of enough rows for half as many int8 blocks as
  // SMs (4096 rows on an H100) is faster on the int8 kernel than in the GEMV
  // (bench_cuda, 8 tokens, 4096 x 4096: 16.2 against 20.5 us); smaller ones
  // (1024 rows: 15.3 against 9.9) stay in the GEMV up to 8 tokens.
  auto on_mmq = [&](const MatmulOut& o) {
    if (n_tokens > kMmqTokens || n_tokens <= 4 || !mmq_enabled()) return false;
    return n_tokens > kGemvTokens || 2 * ((o.w.rows + kTileRows - 1) / kTileRows) >= sm_count;
  };
  for (const MatmulOut& o : outs) {
    if (!on_mmq(o)) continue;
    if (n <= 16) launch_mmq_tile<Block, 2>(o, nb, x, n, sm_count, stream);
    else if (n <= 32) launch_mmq_tile<Block, 4>(o, nb, x, n, sm_count, stream);
    else launch_mmq_tile<Block, 8>(o, nb, x, n, sm_count, stream);
  }
  if (n_tokens > kGemvTokens) {  // the weights on_mmq left take the dp4a tile
    for (const MatmulOut& o : outs)
      if (!on_mmq(o))
        launch_kernel(gemm_quant<Block>, gemm_grid(o.w.rows, n_tokens), 256, 0, stream,
                      static_cast<const uint8_t*>(o.w.data), o.w.row_stride, o.w.rows, nb, x.q, x.dc, n_tokens, o.y);
    return;
  }
  // Decode takes more rows a block, so a block streams more weight bytes for
  // its fixed cost: on an H100, q4_0 at 8192 x 8192 went from 0.42 to 0.56 of
  // copy bandwidth with 4 rows instead of 2, and the 8B's one-stream decode
  // from 309 to 339 tok/s with 8 rows for one token (where a block's stages
  // fit the default 48 KB of shared memory; two tokens keep 4).
  const int decode_rows = gemv_decode_rows();
  const int warps = gemv_warps(nb);
  auto fits = [&](int rows) { return size_t(warps) * rows * stage_words<Block>() * sizeof(uint4) <= 48 * 1024; };
  int one_token_rows = decode_rows;
  while (one_token_rows > 4 && !fits(one_token_rows)) one_token_rows /= 2;  // the default 48 KB, no opt-in
  const int rows_per_block = n <= 1 ? one_token_rows : n <= 2 ? std::min(decode_rows, 4) : kGemvRows;
  const size_t smem = size_t(warps) * rows_per_block * stage_words<Block>() * sizeof(uint4);
  if (fuse.x) {
    if (n != 1 || (rows_per_block != 4 && rows_per_block != 8) || (fuse.swiglu && outs.size() != 2))
      throw std::logic_error("matmul_quant: the fused GEMV takes one token and 4 or 8 rows a block");
    if (fuse.swiglu) {
      const auto seg = [](const MatmulOut& o) {
        return GemvSeg{static_cast<const uint8_t*>(o.w.data), o.w.row_stride, o.w.rows, o.y, 0};
      };
      const GemvSegs segs{{seg(outs[0]), seg(outs[1])}, 2};
      auto* kernel = rows_per_block == 8 ? gemv_quant<Block, 1, 8, true, true> : gemv_quant<Block, 1, 4, true, true>;
      const int64_t half = rows_per_block / 2;
      launch_kernel(kernel, static_cast<unsigned>((outs[0].w.rows + half - 1) / half), 32 * warps, smem, stream, segs,
                    nb, x.q, x.dc, fuse.x, n);
      return;
    }
  } else if (fuse.swiglu) {
    throw std::logic_error("matmul_quant: the GEMV ends in silu(gate) * up only where it quantizes its input");
  }
  auto* kernel = fuse.x   ? (rows_per_block == 8 ? gemv_quant<Block, 1, 8, true> : gemv_quant<Block, 1, 4, true>)
                 : n <= 1 ? (rows_per_block == 16  ? gemv_quant<Block, 1, 16>
                             : rows_per_block == 8 ? gemv_quant<Block, 1, 8>
                             : rows_per_block == 4 ? gemv_quant<Block, 1, 4>
                                                   : gemv_quant<Block, 1, kGemvRows>)
                 : n <= 2 ? (rows_per_block == 4 ? gemv_quant<Block, 2, 4> : gemv_quant<Block, 2, kGemvRows>)
                 : n <= 4 ? gemv_quant<Block, 4, kGemvRows>
                          : gemv_quant<Block, 8, kGemvRows>;
  for (size_t i = 0; i < outs.size();) {  // the weights left, up to kMaxSegs a launch
    GemvSegs segs{};
    unsigned blocks = 0;
    for (; i < outs.size() && segs.n < kMaxSegs; ++i) {
      if (on_mmq(outs[i])) continue;
      const WeightView& w = outs[i].w;
      segs.s[segs.n++] = GemvSeg{static_cast<const uint8_t*>(w.data), w.row_stride, w.rows, outs[i].y, blocks};
      blocks += static_cast<unsigned>((w.rows + rows_per_block - 1) / rows_per_block);
    }
    if (segs.n == 0) break;
    launch_kernel(kernel, blocks, 32 * warps, smem, stream, segs, nb, x.q, x.dc, fuse.x, n);
  }
}

template <DType T>
void matmul_float_typed(const WeightView& w, const float* x, int64_t n_tokens, float* y, cudaStream_t stream) {
  const auto* data = static_cast<const uint8_t*>(w.data);
  const int n = static_cast<int>(n_tokens);
  if (n_tokens <= kGemvTokens) {
    const bool vec = w.cols % 8 == 0 && reinterpret_cast<uintptr_t>(data) % 16 == 0 && w.row_stride % 16 == 0 &&
                     reinterpret_cast<uintptr_t>(x) % 16 == 0;
    auto* kernel = n <= 1 ? gemv_float<T, 1> : n <= 2 ? gemv_float<T, 2> : n <= 4 ? gemv_float<T, 4>
                                                                                  : gemv_float<T, 8>;
    launch_kernel(kernel, gemv_blocks(w.rows), 32 * kGemvWarps, 0, stream, data, w.row_stride, w.rows, w.cols, x, n, y,
                  vec);
  } else {
    launch_kernel(gemm_float<T>, gemm_grid(w.rows, n_tokens), 256, 0, stream, data, w.row_stride, w.rows, w.cols, x,
                  n_tokens, y);
  }
}

}  // namespace

// A one-token step's GEMV may take the activation quantization before it and
// the SwiGLU product after it: on an H100 a decode step launched 14 kernels a
// layer, four of them quantize_act and one silu_mul, each a few microseconds for
// a few kilobytes. Blocks of 4 or 8 rows only (the fused variants compiled; 16
// rows fall back to 8 for want of shared memory anyway); x 16-byte aligned for
// the float4 loads.
bool fuses_one_token(int64_t n_tokens, const float* x) {
  const int rows = gemv_decode_rows();
  return n_tokens == 1 && (rows == 4 || rows == 8) && reinterpret_cast<uintptr_t>(x) % 16 == 0;
}

void quantize_act(DType weight, const float* x, int64_t n_tokens, int64_t cols, QuantAct out, cudaStream_t stream) {
  const int64_t blocks = n_tokens * (cols / kQuantBlock);
  if (blocks <= 0) return;
  launch_kernel(quantize_act_kernel, static_cast<unsigned>((blocks + 7) / 8), 256, 0, stream, weight, x, blocks, out.q,
                out.dc);
  check_launch("matmul: quantize activations");
}

void matmul_quant(std::span<const MatmulOut> outs, QuantAct x, int64_t n_tokens, int sm_count, cudaStream_t stream,
                  Fuse fuse) {
  if (outs.empty()) return;
  switch (outs.front().w.type) {
    case DType::Q4_0: matmul_quant_typed<BlockQ4_0>(outs, x, n_tokens, sm_count, fuse, stream); break;
    case DType::Q4_1: matmul_quant_typed<BlockQ4_1>(outs, x, n_tokens, sm_count, fuse, stream); break;
    case DType::Q8_0: matmul_quant_typed<BlockQ8_0>(outs, x, n_tokens, sm_count, fuse, stream); break;
    default: throw std::invalid_argument("matmul_quant: not a quantized weight type");
  }
  check_launch("matmul");
}

void matmul_float(const WeightView& w, const float* x, int64_t n_tokens, float* y, cudaStream_t stream) {
  switch (w.type) {
    case DType::F32: matmul_float_typed<DType::F32>(w, x, n_tokens, y, stream); break;
    case DType::F16: matmul_float_typed<DType::F16>(w, x, n_tokens, y, stream); break;
    case DType::BF16: matmul_float_typed<DType::BF16>(w, x, n_tokens, y, stream); break;
    default: throw std::invalid_argument("matmul_float: not a float weight type");
  }
  check_launch("matmul");
}

}  // namespace inferd::kernels::cuda
