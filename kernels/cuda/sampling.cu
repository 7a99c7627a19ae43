// Sampling on the GPU, one block per logits row, so a step brings back its
// tokens instead of its logits (a 128k vocabulary is half a megabyte a row).
//
// Greedy rows take the argmax, the lowest id among equal maxima, as the CPU's
// sampler does. Other rows draw by the Gumbel-max trick: the argmax over the
// kept ids of z + G, where z = (logit - max) / temperature and G = -log(-log U)
// with U uniform from a hash of (the row's random bits, id), draws each kept id
// with probability softmax(z) over the kept ids (Gumbel, 1954; the trick as in
// Maddison et al., 2014). Which ids are kept is a threshold on z, as the CPU
// filters keep them (engine/sampler.cpp): top-k's k-th largest z; top-p's
// largest threshold whose kept mass, within top-k's, still reaches top_p of it;
// min-p's ln(min_p) (a probability at least min_p times the best one). Each
// threshold is found by bisection over the float's ordered bits, 32 passes
// over the row, which stays in L2. Ties at a threshold are all kept, where the
// CPU breaks them by id: the two differ only there.
#include <cstdint>

#include "kernels/cuda/cuda_ops.hpp"
#include "kernels/cuda/launch.cuh"

namespace inferd::kernels::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;

struct Best {
  float v;
  int32_t id;
};

__device__ inline Best better(Best a, Best b) { return b.v > a.v || (b.v == a.v && b.id < a.id) ? b : a; }

// The block's best, on every thread. `red` holds kWarps entries.
__device__ Best block_best(Best b, Best* red) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    b = better(b, Best{__shfl_xor_sync(0xffffffffu, b.v, o), __shfl_xor_sync(0xffffffffu, b.id, o)});
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();  // an earlier call's readers are done with red
  if (lane == 0) red[warp] = b;
  __syncthreads();
  b = red[0];
  for (int w = 1; w < kWarps; ++w) b = better(b, red[w]);
  return b;
}

// The block's sum, on every thread, added in the same order on each.
__device__ float block_sum(float x, float* red) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();
  if (lane == 0) red[warp] = x;
  __syncthreads();
  float s = 0.0f;
  for (int w = 0; w < kWarps; ++w) s += red[w];
  return s;
}

// A float's bits as an unsigned key that orders as the floats do (-inf lowest).
__device__ inline uint32_t ordered(float f) {
  const uint32_t u = __float_as_uint(f);
  return u & 0x80000000u ? ~u : u | 0x80000000u;
}

// Uniform in (0, 1) with 53 bits, from (seed, id): splitmix64's finalizer.
__device__ inline double uniform(uint64_t seed, int32_t id) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (uint64_t(id) + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (double(z >> 11) + 0.5) * 0x1.0p-53;
}

// The largest key t >= lo for which at_or_above(t) (a block-wide sum over the
// ids whose z has key >= t) is still >= want; at_or_above(lo) must be.
template <class Sum>
__device__ uint32_t bisect(uint32_t lo, float want, Sum at_or_above) {
  uint32_t hi = 0xFFFFFFFFu;
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo) / 2 + 1;
    if (at_or_above(mid) >= want)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

__global__ __launch_bounds__(kThreads) void sample_kernel(const float* logits, int64_t vocab,
                                                          const RowSampling* params, int32_t* tokens) {
  grid_dependency();
  __shared__ Best red_best[kWarps];
  __shared__ float red_sum[kWarps];
  const int64_t r = blockIdx.x;
  const RowSampling p = params[r];
  const float* row = logits + r * vocab;
  const int32_t n = p.n_valid > 0 && p.n_valid < vocab ? p.n_valid : int32_t(vocab);
  const int tid = threadIdx.x;

  Best best{-INFINITY, 0};  // all -inf or NaN: id 0, as the CPU's argmax
  for (int32_t i = tid; i < n; i += kThreads) best = better(best, Best{row[i], i});  // NaN never wins
  best = block_best(best, red_best);
  if (p.greedy || !isfinite(best.v)) {  // the CPU's sampler: an infinite best is certain
    if (tid == 0) tokens[r] = best.id;
    return;
  }
  const float m = best.v, inv_t = 1.0f / p.temperature;
  auto z = [&](int32_t i) {
    const float x = row[i];
    return x == x ? (x - m) * inv_t : -INFINITY;
  };
  auto count_at_or_above = [&](uint32_t t) {
    float c = 0.0f;
    for (int32_t i = tid; i < n; i += kThreads) c += ordered(z(i)) >= t ? 1.0f : 0.0f;
    return block_sum(c, red_sum);
  };
  auto mass_at_or_above = [&](uint32_t t) {
    float s = 0.0f;
    for (int32_t i = tid; i < n; i += kThreads) {
      const float zi = z(i);
      if (ordered(zi) >= t) s += __expf(zi);
    }
    return block_sum(s, red_sum);
  };

  uint32_t keep = 0;  // ids whose z has a key >= keep are kept
  if (p.top_k > 0 && p.top_k < n) keep = bisect(0, float(p.top_k), count_at_or_above);
  if (p.top_p < 1.0f) keep = bisect(keep, p.top_p * mass_at_or_above(keep), mass_at_or_above);
  if (p.min_p > 0.0f) keep = max(keep, ordered(logf(p.min_p)));

  Best draw{-INFINITY, best.id};
  for (int32_t i = tid; i < n; i += kThreads) {
    const float zi = z(i);
    if (ordered(zi) < keep) continue;
    const float e = static_cast<float>(-log(uniform(p.random, i)));  // Exp(1); -log of it is Gumbel
    draw = better(draw, Best{zi - logf(e), i});
  }
  draw = block_best(draw, red_best);
  if (tid == 0) tokens[r] = draw.id;
}

}  // namespace

void sample(const float* logits, int64_t rows, int64_t vocab, const RowSampling* params, int32_t* tokens,
            cudaStream_t stream) {
  if (rows <= 0) return;
  launch_kernel(sample_kernel, static_cast<unsigned>(rows), kThreads, 0, stream, logits, vocab, params, tokens);
  check_launch("sample");
}

}  // namespace inferd::kernels::cuda
