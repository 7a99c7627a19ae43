// The inner loops of the CPU backend behind a table of function pointers, one
// table per instruction set (scalar, AVX2, AVX-512), chosen once at run time. The backend
// (cpu_backend.cpp) owns threading and shape keys; a table function works on the
// slice of the problem it is given.
#pragma once
#include <cstdint>

#include "kernels/backend.hpp"

namespace inferd::kernels::cpu {

// The activations of a matmul against quantized weights, quantized to int8 in
// blocks of 32 for the integer dot products, like the reference (its Q8_0 / Q8_1
// activation blocks). The blocks of four consecutive tokens at one block index
// sit side by side, so a kernel reads their scales as one 4-wide vector.
// Token t's block b is slot t % 4 of tile [(t / 4) * blocks_per_row + b].
//
// A block's value is d * q. `c` is the weight type's correction, added as
// k_w * c once per block (k_w = the weight block's m for Q4_1, its d for Q4_0):
// for Q4_1 c = s = d * sum(q) rounded to f16 (Q8_1's s); for Q4_0, whose
// nibbles are used unsigned, c = -8 * d * sum(q) undoes their offset of 8 (Q5_0:
// -16 * d * sum(q)); Q5_1 as Q4_1. The k-quants Q4_K / Q5_K read each sub-block of
// 32 as one block (k_w = dmin * m, c = -d * sum(q)); Q6_K and Q8_0 need no c.
inline constexpr int kActTileTokens = 4;
struct ActTile {
  float d[kActTileTokens];  // f16-rounded scales, as the reference stores them
  float c[kActTileTokens];
  int8_t q[kActTileTokens][32];
};

// c of an activation block for `weight` (see ActTile), from its scale d unrounded
// and dr rounded to f16. For Q4_1 / Q5_1 the caller rounds the result to f16.
inline bool act_correction_is_half(DType weight) { return weight == DType::Q4_1 || weight == DType::Q5_1; }
inline float act_correction(DType weight, float d, float dr, int sum) {
  const float s = static_cast<float>(sum);
  switch (weight) {
    case DType::Q4_1:
    case DType::Q5_1: return d * s;
    case DType::Q4_0: return -8.0f * dr * s;
    case DType::Q5_0: return -16.0f * dr * s;
    case DType::Q4_K:
    case DType::Q5_K: return -(dr * s);
    default: return 0;
  }
}

// MXFP4 activations in the weights' nibble order, so that a kernel pairs each
// block's 16 low nibbles (even elements) and 16 high nibbles (odd elements) with
// contiguous activations: each block of 32 of x becomes its 16 even elements,
// then its 16 odd ones. n % 32 == 0.
inline void to_nibble_order(const float* x, int64_t n, float* out) {
  for (int64_t b = 0; b < n; b += 32)
    for (int j = 0; j < 16; ++j) {
      out[b + j] = x[b + 2 * j];
      out[b + 16 + j] = x[b + 2 * j + 1];
    }
}

// The SIMD tables' matmul_scaled: rows [r0, r1) in tiles of up to
// kActTileTokens tokens, each row's weights decoded once per tile by the row
// kernel of its format for the tile's T tokens (fp8[T - 1] or mxfp4[T - 1]: y at
// the row's output of the tile's first token). Static: each SIMD file's copy
// stays with its instruction set.
using ScaledRowFn = void (*)(const ScaledWeightView& w, int64_t r, const float* x, float* y, int64_t ldy);
struct ScaledRowKernels {
  ScaledRowFn fp8[kActTileTokens], mxfp4[kActTileTokens];
};
static inline void scaled_token_tiles(const ScaledRowKernels& k, const ScaledWeightView& w, const float* x,
                                      int64_t n_tokens, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  const ScaledRowFn* by_tokens = w.format == ScaledFormat::Mxfp4 ? k.mxfp4 : k.fp8;
  for (int64_t t0 = 0; t0 < n_tokens; t0 += kActTileTokens) {
    const ScaledRowFn row = by_tokens[(n_tokens - t0 < kActTileTokens ? n_tokens - t0 : kActTileTokens) - 1];
    for (int64_t r = r0; r < r1; ++r) row(w, r, x + t0 * w.cols, y + t0 * ldy + r, ldy);
  }
}

struct KernelTable {
  const char* isa;  // "scalar", "avx2", "avx512"

  // Quantizes one token's n activations (n % 32 == 0) for a matmul against
  // `weight` blocks into slot `slot` of tiles[0 .. n / 32).
  void (*quantize_act)(DType weight, const float* x, int64_t n, ActTile* tiles, int slot);
  // y[t * ldy + r] = row r of w . token t, for r in [r0, r1), t < n_tokens.
  // Quantized weights read the activation tiles xq.
  void (*matmul_quant)(const WeightView& w, const ActTile* xq, int64_t n_tokens, float* y, int64_t ldy,
                       int64_t r0, int64_t r1);
  // Float weights (F32, F16, BF16) read x as it is. A table whose matmul_float
  // repacks weights says how many floats of scratch one call needs
  // (matmul_float_scratch; null or 0: none); each thread passes its own.
  int64_t (*matmul_float_scratch)(const WeightView& w, int64_t n_tokens);
  void (*matmul_float)(const WeightView& w, const float* x, int64_t n_tokens, float* y, int64_t ldy, int64_t r0,
                       int64_t r1, float* scratch);

  // Scaled weights (scaled_weight.hpp), rows [r0, r1) for n_tokens tokens. An
  // Mxfp4 x is in nibble order (see to_nibble_order); Fp8Block x as it is.
  void (*matmul_scaled)(const ScaledWeightView& w, const float* x, int64_t n_tokens, float* y, int64_t ldy,
                        int64_t r0, int64_t r1);

  void (*rmsnorm_row)(const float* x, const float* weight, float* y, int64_t n, float eps);
  void (*silu_mul)(const float* gate, const float* up, float* out, int64_t n);
  void (*add)(float* y, const float* x, int64_t n);

  // Attention, in the reference's order of operations: scores, softmax over
  // each query's whole row, probabilities rounded to the cache's precision,
  // then the weighted sum of V. Queries that read the same K/V rows (the heads
  // of a kv group, the tokens of one sequence) are passed together so each row
  // is loaded once for all of them.
  //
  // s[i * ld + p - p0] = scale * q_i . k_p for positions [p0, p1) of kv head
  // `kv_head` through the block table; q: [nq][head_dim], already rounded to the
  // cache's precision.
  void (*attn_scores)(const KvLayerView& kv, const int32_t* block_table, int32_t p0, int32_t p1, const float* q,
                      int nq, int kv_head, float scale, float* s, int64_t ld);
  // s[j] = exp(s[j] - max(s)) for j < n; returns the sum, accumulated in double.
  double (*softmax_exp)(float* s, int64_t n);
  // s[j] *= inv, then rounded to f16 when `to_f16`.
  void (*scale_probs)(float* s, int64_t n, float inv, bool to_f16);
  // acc[i][:] += sum over positions p in [p0, p1) of w[i * ld + p - p0] * v_p.
  void (*attn_values)(const KvLayerView& kv, const int32_t* block_table, int32_t p0, int32_t p1, const float* w,
                      int64_t ld, int nq, int kv_head, float* acc);

  // out = gelu(gate) * up, gelu's tanh approximation written as
  // x * sigmoid(2 * sqrt(2 / pi) * (x + 0.044715 x^3)) (the same function, exact
  // where 1 + tanh would cancel).
  void (*gelu_mul)(const float* gate, const float* up, float* out, int64_t n);
};

// The portable table: the fallback and the reference the SIMD tables are tested against.
extern const KernelTable kScalarKernels;
#if INFERD_HAVE_AVX2_KERNELS
// Compiled with -mavx2 -mfma -mf16c: only for CPUs where avx2_kernels() is non-null.
extern const KernelTable kAvx2Kernels;
#endif
// nullptr when not compiled in or the CPU lacks AVX2, FMA or F16C.
const KernelTable* avx2_kernels();

#if INFERD_HAVE_AVX512_KERNELS
// Compiled with AVX-512 F/BW/VL + VNNI. The ops it leaves null (not ported, or
// measured no faster: see the table's comment in kernels_avx512.cpp) are
// kAvx2Kernels' in avx512_kernels().
extern const KernelTable kAvx512Kernels;
#endif
// nullptr when not compiled in or the CPU lacks AVX-512 F/BW/VL, VNNI or AVX2.
const KernelTable* avx512_kernels();

}  // namespace inferd::kernels::cpu
