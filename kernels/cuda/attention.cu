// Paged causal attention on the GPU. A block takes one token and one kv head:
// its queries (that head's group of query heads) share every K and V row it
// reads through the token's block table. Positions go by in chunks of kChunk,
// one per thread for the scores, with an online softmax (running max and sum)
// so a context of any length needs no score row in memory. Decode steps have
// few (token, kv head) pairs: their positions are split over several blocks
// (flash decoding) and the partial results combined by a second kernel. Each
// token's slices follow from its own position (cuda_ops.hpp, AttnSplit), read
// on the device, so one launch serves every context length: a captured decode
// step replays at any position.
//
// Against the CPU backend: queries are rounded to the cache's precision as it
// does; the probabilities are not rounded to f16 (the CPU rounds them after a
// whole-row softmax, which an online softmax never holds), and sums run in
// another order, so results differ at the level of f16 rounding. Soft-capped
// scores and a sliding window (Gemma) are taken as the CPU takes them; a
// window's slices outside it read nothing.
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>

#include "kernels/cuda/cuda_ops.hpp"
#include "kernels/cuda/launch.cuh"

namespace inferd::kernels::cuda {
namespace {

constexpr int kChunk = 128;  // positions per pass; also the threads per block; a slice's granule

// The positions of each slice of a token at `pos`: at most `target` slices of whole chunks.
__host__ __device__ inline int32_t slice_len(int32_t pos, int target) {
  const int32_t per = (pos + target) / target;  // ceil((pos + 1) / target)
  return (per + kChunk - 1) / kChunk * kChunk;
}

template <class T>
__device__ inline void load8(const T* p, float (&v)[8]) {
  if constexpr (sizeof(T) == 2) {
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
      v[2 * i] = f.x, v[2 * i + 1] = f.y;
    }
  } else {
    const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  }
}

__device__ inline float to_float(__half h) { return __half2float(h); }
__device__ inline float to_float(float f) { return f; }

// A score as the CPU backend takes it: soft-capped when the model asks.
__device__ inline float capped(float s, float cap) { return cap > 0 ? cap * tanhf(s / cap) : s; }

// A slice's positions [begin, end): its share of the token's context, within
// the sliding window when there is one (positions pos - window + 1 .. pos).
struct SliceRange {
  int32_t begin, end;
};
__device__ inline SliceRange slice_range(int32_t pos, int target, int split, int32_t window) {
  const int32_t len = slice_len(pos, target);
  const int32_t lo = window > 0 ? max(0, pos + 1 - window) : 0;
  return {max(split * len, lo), min(split * len + len, pos + 1)};
}

// Shared memory of one block, in floats: queries and accumulators [group][hd],
// scores [group][kChunk], running max, sum and rescale factor per query, then
// each chunk position's row offset (int64, 8-byte aligned).
__host__ __device__ inline int64_t smem_floats(int group, int hd) {
  return (int64_t(2) * group * hd + int64_t(group) * kChunk + 3 * group + 1) / 2 * 2;
}

// A slice past the token's context: its queries' partial results are empty (l = 0).
__device__ inline void empty_slice(int64_t t, int kvh, int group, int n_heads, int splits, int split, float2* part_ml) {
  for (int g = threadIdx.x; g < group; g += blockDim.x)
    part_ml[(t * n_heads + int64_t(kvh) * group + g) * splits + split] = make_float2(-INFINITY, 0.0f);
}

template <class T>
__global__ __launch_bounds__(kChunk) void attention_kernel(KvLayerView kv, const AttnToken* toks, const float* q,
                                                           int n_heads, float scale, AttentionExtras ex, int target,
                                                           float* out, float* part_acc, float2* part_ml) {
  grid_dependency();
  extern __shared__ float smem[];
  const int hd = kv.head_dim, n_kv = kv.n_kv_heads, group = n_heads / n_kv, bs = kv.block_size;
  float* qs = smem;
  float* acc = qs + group * hd;
  float* sc = acc + group * hd;
  float* m = sc + group * kChunk;
  float* l = m + group;
  float* alpha = l + group;
  int64_t* rowoff = reinterpret_cast<int64_t*>(smem + smem_floats(group, hd));

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, n_warps = kChunk / 32;
  const int64_t t = blockIdx.x;
  const int kvh = blockIdx.y, split = blockIdx.z, splits = gridDim.z;
  const int32_t pos = toks[t].pos;
  const int32_t* bt = toks[t].block_table;
  const auto [p_begin, p_end] = slice_range(pos, target, split, ex.window);
  if (p_begin >= p_end) return empty_slice(t, kvh, group, n_heads, splits, split, part_ml);
  const float* qt = q + (t * n_heads + int64_t(kvh) * group) * hd;

  for (int i = tid; i < group * hd; i += kChunk) {
    float v = qt[i];
    if constexpr (sizeof(T) == 2) v = __half2float(__float2half_rn(v));
    qs[i] = v;
    acc[i] = 0.0f;
  }
  for (int g = tid; g < group; g += kChunk) m[g] = -INFINITY, l[g] = 0.0f;
  __syncthreads();

  const int64_t slot_stride = int64_t(n_kv) * hd;
  const T* kbase = static_cast<const T*>(kv.k);
  const T* vbase = static_cast<const T*>(kv.v);
  for (int32_t c0 = p_begin; c0 < p_end; c0 += kChunk) {
    const int n = min(kChunk, p_end - c0);
    if (tid < n) {
      const int32_t p = c0 + tid;
      const int64_t off = (int64_t(bt[p / bs]) * bs + p % bs) * slot_stride + int64_t(kvh) * hd;
      rowoff[tid] = off;
      const T* k = kbase + off;
      for (int g = 0; g < group; ++g) {
        const float* qg = qs + g * hd;
        float dot = 0.0f;
        for (int d = 0; d < hd; d += 8) {
          float kv8[8];
          load8(k + d, kv8);
#pragma unroll
          for (int e = 0; e < 8; ++e) dot += qg[d + e] * kv8[e];
        }
        sc[g * kChunk + tid] = capped(dot * scale, ex.softcap);
      }
    }
    __syncthreads();
    for (int g = warp; g < group; g += n_warps) {
      float* s = sc + g * kChunk;
      float mx = -INFINITY;
      for (int j = lane; j < n; j += 32) mx = fmaxf(mx, s[j]);
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const float m_new = fmaxf(m[g], mx);
      float sum = 0.0f;
      for (int j = lane; j < n; j += 32) {
        const float e = expf(s[j] - m_new);
        s[j] = e;
        sum += e;
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      __syncwarp();
      if (lane == 0) {
        const float a = expf(m[g] - m_new);  // 0 on the first chunk (m = -inf)
        alpha[g] = a;
        l[g] = l[g] * a + sum;
        m[g] = m_new;
      }
    }
    __syncthreads();
    for (int i = tid; i < group * hd; i += kChunk) {
      const int g = i / hd, d = i % hd;
      const float* p = sc + g * kChunk;
      float a = acc[i] * alpha[g];
      for (int j = 0; j < n; ++j) a += p[j] * to_float(vbase[rowoff[j] + d]);
      acc[i] = a;
    }
    __syncthreads();
  }

  for (int i = tid; i < group * hd; i += kChunk) {
    const int g = i / hd, d = i % hd;
    const int64_t th = t * n_heads + int64_t(kvh) * group + g;  // (token, head)
    if (splits == 1) {
      out[th * hd + d] = acc[i] / l[g];
    } else {
      part_acc[(th * splits + split) * hd + d] = acc[i];
      if (d == 0) part_ml[th * splits + split] = make_float2(m[g], l[g]);
    }
  }
}

// The fast path, for head_dim 64, 128 or 256 and groups of up to G query heads:
// L = HD / 8 threads share a position's row, each loading 8 values with one
// 16-byte load, so a warp's loads are whole rows and R = kChunk / L positions
// are read at once, kUnroll of them in flight per thread. Each thread keeps its
// 8 dimensions of every query's accumulator in registers; the R partial sums
// are added once, at the end.
constexpr int kUnroll = 4;

template <class T, int HD, int G>
__global__ __launch_bounds__(kChunk) void attention_fast(KvLayerView kv, const AttnToken* toks, const float* q,
                                                         int n_heads, float scale, AttentionExtras ex, int target,
                                                         float* out, float* part_acc, float2* part_ml) {
  grid_dependency();
  constexpr int L = HD / 8, R = kChunk / L;
  __shared__ float sc[G][kChunk];
  __shared__ int64_t rowoff[kChunk];
  __shared__ float m_s[G], l_s[G], alpha_s[G];
  __shared__ float red[R][G * HD];

  const int tid = threadIdx.x, sub = tid % L, r = tid / L, lane = tid % 32, warp = tid / 32;
  const int n_kv = kv.n_kv_heads, group = n_heads / n_kv, bs = kv.block_size;
  const int64_t t = blockIdx.x;
  const int kvh = blockIdx.y, split = blockIdx.z, splits = gridDim.z;
  const int32_t pos = toks[t].pos;
  const int32_t* bt = toks[t].block_table;
  const auto [p_begin, p_end] = slice_range(pos, target, split, ex.window);
  if (p_begin >= p_end) return empty_slice(t, kvh, group, n_heads, splits, split, part_ml);

  float qv[G][8], acc[G][8];
#pragma unroll
  for (int g = 0; g < G; ++g)
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      float v = 0.0f;
      if (g < group) {
        v = q[(t * n_heads + int64_t(kvh) * group + g) * HD + sub * 8 + e];
        if constexpr (sizeof(T) == 2) v = __half2float(__float2half_rn(v));
      }
      qv[g][e] = v;
      acc[g][e] = 0.0f;
    }
  if (tid < G) m_s[tid] = -INFINITY, l_s[tid] = 0.0f;

  const int64_t slot_stride = int64_t(n_kv) * HD;
  const T* kbase = static_cast<const T*>(kv.k) + sub * 8;
  const T* vbase = static_cast<const T*>(kv.v) + sub * 8;
  for (int32_t c0 = p_begin; c0 < p_end; c0 += kChunk) {
    const int n = min(kChunk, p_end - c0);
    if (tid < n) {
      const int32_t p = c0 + tid;
      rowoff[tid] = (int64_t(bt[p / bs]) * bs + p % bs) * slot_stride + int64_t(kvh) * HD;
    }
    __syncthreads();
    // Scores: every lane of a warp runs the same iterations (the shuffles need them).
    for (int i0 = 0; i0 < n; i0 += R * kUnroll) {
      float kf[kUnroll][8];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = i0 + u * R + r;
        if (i < n) {
          load8(kbase + rowoff[i], kf[u]);
        } else {
#pragma unroll
          for (int e = 0; e < 8; ++e) kf[u][e] = 0.0f;
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        float d[G];
#pragma unroll
        for (int g = 0; g < G; ++g) {
          d[g] = 0.0f;
#pragma unroll
          for (int e = 0; e < 8; ++e) d[g] += qv[g][e] * kf[u][e];
        }
#pragma unroll
        for (int o = L / 2; o > 0; o >>= 1)
#pragma unroll
          for (int g = 0; g < G; ++g) d[g] += __shfl_xor_sync(0xffffffffu, d[g], o);
        const int i = i0 + u * R + r;
        if (sub == 0 && i < n)
#pragma unroll
          for (int g = 0; g < G; ++g) sc[g][i] = capped(d[g] * scale, ex.softcap);
      }
    }
    __syncthreads();
    for (int g = warp; g < group; g += kChunk / 32) {
      float mx = -INFINITY;
      for (int j = lane; j < n; j += 32) mx = fmaxf(mx, sc[g][j]);
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const float m_new = fmaxf(m_s[g], mx);
      float sum = 0.0f;
      for (int j = lane; j < n; j += 32) {
        const float e = expf(sc[g][j] - m_new);
        sc[g][j] = e;
        sum += e;
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      __syncwarp();
      if (lane == 0) {
        const float a = expf(m_s[g] - m_new);
        alpha_s[g] = a;
        l_s[g] = l_s[g] * a + sum;
        m_s[g] = m_new;
      }
    }
    __syncthreads();
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const float a = g < group ? alpha_s[g] : 0.0f;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[g][e] *= a;
    }
#pragma unroll kUnroll
    for (int i = r; i < n; i += R) {
      float vf[8];
      load8(vbase + rowoff[i], vf);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const float p = g < group ? sc[g][i] : 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[g][e] += p * vf[e];
      }
    }
    __syncthreads();
  }

#pragma unroll
  for (int g = 0; g < G; ++g)
#pragma unroll
    for (int e = 0; e < 8; ++e) red[r][g * HD + sub * 8 + e] = acc[g][e];
  __syncthreads();
  for (int i = tid; i < group * HD; i += kChunk) {
    float a = 0.0f;
#pragma unroll
    for (int k = 0; k < R; ++k) a += red[k][i];
    const int g = i / HD, d = i % HD;
    const int64_t th = t * n_heads + int64_t(kvh) * group + g;  // (token, head)
    if (splits == 1) {
      out[th * HD + d] = a / l_s[g];
    } else {
      part_acc[(th * splits + split) * HD + d] = a;
      if (d == 0) part_ml[th * splits + split] = make_float2(m_s[g], l_s[g]);
    }
  }
}

// One block per (token, head): the splits' partial sums rescaled to their
// common max. Each split's weight is computed once, into shared memory, so the
// sum over splits is independent loads, not a chain of exps. Empty slices (past
// the token's context: l = 0, nothing written but l) are skipped, so launching
// more of them changes no bit of the result.
constexpr int kMaxSplits = 1024;

__global__ void attention_combine(const float* part_acc, const float2* part_ml, int splits, int hd, float* out) {
  grid_dependency();
  __shared__ float weight[kMaxSplits];
  __shared__ float reduce[32];
  const int64_t th = blockIdx.x;
  const float2* ml = part_ml + th * splits;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, n_warps = blockDim.x / 32;
  float mx = -INFINITY;
  for (int s = tid; s < splits; s += blockDim.x)
    if (ml[s].y > 0.0f) mx = fmaxf(mx, ml[s].x);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  if (lane == 0) reduce[warp] = mx;
  __syncthreads();
  mx = reduce[0];
  for (int w = 1; w < n_warps; ++w) mx = fmaxf(mx, reduce[w]);
  float total = 0.0f;
  for (int s = tid; s < splits; s += blockDim.x) {
    const bool used = ml[s].y > 0.0f;
    const float wgt = used ? expf(ml[s].x - mx) : 0.0f;
    weight[s] = used ? wgt : -1.0f;  // -1: skipped below
    if (used) total += ml[s].y * wgt;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) total += __shfl_xor_sync(0xffffffffu, total, o);
  __syncthreads();  // everyone has read reduce[] for the max
  if (lane == 0) reduce[warp] = total;
  __syncthreads();
  total = 0.0f;
  for (int w = 0; w < n_warps; ++w) total += reduce[w];
  for (int d = tid; d < hd; d += blockDim.x) {
    float a = 0.0f;
#pragma unroll 8
    for (int s = 0; s < splits; ++s)
      if (weight[s] >= 0.0f) a += part_acc[(th * splits + s) * hd + d] * weight[s];
    out[th * hd + d] = a / total;
  }
}

// The fast kernel for this head size and group, if there is one.
template <class T, int HD>
bool launch_fast_hd(const KvLayerView& kv, const AttnToken* toks, const float* q, int n_heads, float scale,
                    AttentionExtras ex, float* out, AttnSplit split, float* part_acc, float2* part_ml, dim3 grid,
                    cudaStream_t stream) {
  const int group = n_heads / kv.n_kv_heads;
  auto* kernel = group <= 1   ? attention_fast<T, HD, 1>
                 : group <= 2 ? attention_fast<T, HD, 2>
                 : group <= 4 ? attention_fast<T, HD, 4>
                 : group <= 8 ? attention_fast<T, HD, 8>
                              : nullptr;
  if (!kernel) return false;
  launch_kernel(kernel, grid, kChunk, 0, stream, kv, toks, q, n_heads, scale, ex, split.target, out, part_acc,
                part_ml);
  return true;
}

template <class T>
bool launch_fast(const KvLayerView& kv, const AttnToken* toks, const float* q, int n_heads, float scale,
                 AttentionExtras ex, float* out, AttnSplit split, float* part_acc, float2* part_ml, dim3 grid,
                 cudaStream_t stream) {
  switch (kv.head_dim) {
    case 64: return launch_fast_hd<T, 64>(kv, toks, q, n_heads, scale, ex, out, split, part_acc, part_ml, grid, stream);
    case 128:
      return launch_fast_hd<T, 128>(kv, toks, q, n_heads, scale, ex, out, split, part_acc, part_ml, grid, stream);
    case 256:
      return launch_fast_hd<T, 256>(kv, toks, q, n_heads, scale, ex, out, split, part_acc, part_ml, grid, stream);
    default: return false;
  }
}

template <class T>
void launch(const KvLayerView& kv, const AttnToken* toks, int64_t n_tokens, const float* q, int n_heads, float scale,
            AttentionExtras ex, float* out, AttnSplit split, float* scratch, cudaStream_t stream) {
  const int group = n_heads / kv.n_kv_heads;
  const size_t smem = size_t(smem_floats(group, kv.head_dim)) * sizeof(float) + kChunk * sizeof(int64_t);
  float* part_acc = scratch;
  auto* part_ml = reinterpret_cast<float2*>(scratch + n_tokens * n_heads * split.splits * kv.head_dim);
  const dim3 grid(static_cast<unsigned>(n_tokens), static_cast<unsigned>(kv.n_kv_heads),
                  static_cast<unsigned>(split.splits));
  if (smem > 48 * 1024)
    check(cudaFuncSetAttribute(attention_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
          "attention: cudaFuncSetAttribute");
  if (!launch_fast<T>(kv, toks, q, n_heads, scale, ex, out, split, part_acc, part_ml, grid, stream))
    launch_kernel(attention_kernel<T>, grid, kChunk, smem, stream, kv, toks, q, n_heads, scale, ex, split.target, out,
                  part_acc, part_ml);
  check_launch("attention");
  if (split.splits > 1) {
    launch_kernel(attention_combine, static_cast<unsigned>(n_tokens * n_heads), 128, 0, stream, part_acc, part_ml,
                  split.splits, kv.head_dim, out);
    check_launch("attention: combine");
  }
}

}  // namespace

AttnSplit attention_split(int64_t n_tokens, int n_kv_heads, int64_t reach, int sm_count) {
  // Enough blocks for several per multiprocessor: each keeps only a few rows in
  // flight. Counted for the token bucket, not the count, so a decode batch padded
  // to its bucket slices each token as the batch itself would.
  const int64_t blocks = pow2_bucket(n_tokens) * n_kv_heads, want_blocks = 4 * int64_t(sm_count);
  AttnSplit s;
  if (blocks >= want_blocks) return s;
  s.target = static_cast<int>(std::min<int64_t>((want_blocks + blocks - 1) / blocks, kMaxSplits));
  // No token reaching further than `reach` has more slices than chunks.
  s.splits = reach <= 0 ? s.target : static_cast<int>(std::min<int64_t>(s.target, (reach + kChunk - 1) / kChunk));
  return s;
}

int64_t attention_scratch_floats(int64_t n_tokens, int n_heads, int head_dim, AttnSplit split) {
  if (split.splits <= 1) return 0;
  return n_tokens * n_heads * split.splits * (int64_t(head_dim) + 2);
}

void attention(const KvLayerView& kv, const AttnToken* toks, int64_t n_tokens, const float* q, int n_heads,
               float scale, const AttentionExtras& extras, float* out, AttnSplit split, float* scratch,
               cudaStream_t stream) {
  if (kv.type == DType::F16)
    launch<__half>(kv, toks, n_tokens, q, n_heads, scale, extras, out, split, scratch, stream);
  else
    launch<float>(kv, toks, n_tokens, q, n_heads, scale, extras, out, split, scratch, stream);
}

}  // namespace inferd::kernels::cuda
