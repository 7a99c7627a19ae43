// AVX-512 (F, BW, VL) + VNNI kernels: the quantized matmul (Q4_0, Q4_1, Q8_0),
// the float-weight matmul (F32, F16, BF16), attention (scores, softmax,
// probabilities, values) and the elementwise ops; the table's other ops are
// AVX2's (see kAvx512Kernels at the end). f16 converts through _mm512_cvtph_ps /
// _mm512_cvtps_ph (AVX-512F), not AVX512-FP16. This file alone is compiled with
// those instruction sets, and without FMA contraction, and runs only after the
// backend has checked the CPU.
// As in kernels_avx2.cpp, everything here has internal linkage and uses no
// standard-library templates.
//
// Quantized matmul layout: sixteen weight rows share a register, one row per
// 32-bit lane. A block's weights are repacked so that register j holds elements
// 4j..4j+3 of all sixteen rows; eight vpdpbusd with a token's four matching activation bytes
// broadcast leave row r's exact int32 dot in lane r. Each (row, token) then
// takes the scalar kernel's steps in its order (one product for the scale, one
// for the dot, one add per block, the correction summed apart), so the results
// are those of kScalarKernels bit for bit, for any number of tokens.
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12 warns inside its own AVX-512 headers (their _mm512_undefined_* values).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include <type_traits>

#include "kernels/cpu/kernel_table.hpp"
#include "kernels/cpu/kv_walk.hpp"
#include "kernels/quant_blocks.hpp"

namespace inferd::kernels::cpu {
namespace {

constexpr int kRows = 16;   // weight rows per register
constexpr int kTokens = 8;  // tokens per pass over a packed row group (two activation tiles)
// Up to this many tokens, a row group is packed in registers block by block
// (rows_x_few); more read it from scratch, packed once for every token tile.
constexpr int kFewTokens = 8;

// One block of sixteen rows, repacked.
struct alignas(64) Packed {
  __m512i q[8];  // q[j] lane r: elements 4j..4j+3 of row r as unsigned bytes
  __m512 d;      // the rows' scales
  __m512 k;      // the rows' factor of the activation correction c (see ActTile)
};

// What a weight type declares beyond its block: `custom` types pack through their
// own W::pack (the k-quants: several blocks of 32 per block, state kept from one
// to the next in W::State); n_start accumulator starts per token and block
// (subtracting an offset of the weights); `halves`: Q6_K's two scales per block.
struct Legacy {
  static constexpr bool custom = false, halves = false;
  struct State {};
};

// Per weight type: block layout and how its bytes become unsigned dpbusd operands.
// head: each row's first four block bytes; d: the rows' scales.
struct Q4_0A : Legacy {
  using Block = BlockQ4_0;
  static constexpr bool has_k = true;
  static constexpr bool biased = false;
  static constexpr int n_start = 0, kBytes32 = 18;
  static constexpr int qs = 2;  // offset of the quants in the block
  static __m512 k(__m512i, __m512 d) { return d; }
};
struct Q4_1A : Legacy {
  using Block = BlockQ4_1;
  static constexpr bool has_k = true;
  static constexpr bool biased = false;
  static constexpr int n_start = 0, kBytes32 = 20;
  static constexpr int qs = 4;
  static __m512 k(__m512i head, __m512) { return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(head, 16))); }
};
// Q8_0's signed bytes enter vpdpbusd as w + 128; the dot then carries an extra
// 128 * sum(a), subtracted through the accumulator's start value.
struct Q8_0A : Legacy {
  using Block = BlockQ8_0;
  static constexpr bool has_k = false;
  static constexpr bool biased = true;
  static constexpr int n_start = 1, kBytes32 = 34;
  static constexpr int qs = 2;
  static __m512 k(__m512i, __m512 d) { return d; }  // unused
};

// u[j] lane r = bytes 4j..4j+3 of src + off[r], for sixteen rows of 16 bytes.
inline void transpose16x4(const uint8_t* src, const int32_t* off, __m512i u[4]) {
  __m512i z[4];  // z[m]'s 128-bit lane i holds row 4i + m
  for (int m = 0; m < 4; ++m) {
    z[m] = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + off[m])));
    z[m] = _mm512_inserti32x4(z[m], _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + off[4 + m])), 1);
    z[m] = _mm512_inserti32x4(z[m], _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + off[8 + m])), 2);
    z[m] = _mm512_inserti32x4(z[m], _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + off[12 + m])), 3);
  }
  // A 4x4 dword transpose inside each 128-bit lane puts row 4i + m at lane 4i + m.
  const __m512i t0 = _mm512_unpacklo_epi32(z[0], z[1]), t1 = _mm512_unpackhi_epi32(z[0], z[1]);
  const __m512i t2 = _mm512_unpacklo_epi32(z[2], z[3]), t3 = _mm512_unpackhi_epi32(z[2], z[3]);
  u[0] = _mm512_unpacklo_epi64(t0, t2);
  u[1] = _mm512_unpackhi_epi64(t0, t2);
  u[2] = _mm512_unpacklo_epi64(t1, t3);
  u[3] = _mm512_unpackhi_epi64(t1, t3);
}

// The block at `blk` in row 0 and at blk + off[r] in row r, repacked (offs: off as a vector).
template <class W>
inline void pack_block(const uint8_t* blk, const int32_t* off, __m512i offs, Packed& p) {
  const __m512i head = _mm512_i32gather_epi32(offs, blk, 1);  // d, then m (Q4_1) or quants
  p.d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(head));
  p.k = W::k(head, p.d);
  __m512i u[4];
  transpose16x4(blk + W::qs, off, u);
  if constexpr (W::biased) {
    const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
    for (int j = 0; j < 4; ++j) p.q[j] = _mm512_xor_si512(u[j], bias);
    transpose16x4(blk + W::qs + 16, off, u);
    for (int j = 0; j < 4; ++j) p.q[4 + j] = _mm512_xor_si512(u[j], bias);
  } else {
    // Element j < 16 is the low nibble of byte j, element 16 + j its high nibble.
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    for (int j = 0; j < 4; ++j) {
      p.q[j] = _mm512_and_si512(u[j], low4);
      p.q[4 + j] = _mm512_and_si512(_mm512_srli_epi16(u[j], 4), low4);
    }
  }
}

// ---- the 5-bit types and the k-quants --------------------------------------

// Bit 4 of elements 4j..4j+3 in each byte of lane r, from qh (lane r: a row's
// 32 high bits): the four bits of (qh >> 4j) spread one per byte by one product
// whose partial products do not overlap.
inline __m512i high_bits(__m512i qh, int j) {
  const __m512i t = _mm512_and_si512(_mm512_srli_epi32(qh, 4 * j), _mm512_set1_epi32(0x0f));
  return _mm512_and_si512(_mm512_mullo_epi32(t, _mm512_set1_epi32(0x02040810)), _mm512_set1_epi32(0x10101010));
}

// Q5_0 / Q5_1: Q4_0 / Q4_1 with a fifth bit; the -16 of Q5_0 goes through c like Q4_0's -8.
template <class Blk, int kQh>
inline void pack_5bit(const uint8_t* blk, const int32_t* off, __m512i offs, Packed& p, bool has_m) {
  const __m512i head = _mm512_i32gather_epi32(offs, blk, 1);
  const __m512i qh = _mm512_i32gather_epi32(offs, blk + kQh, 1);
  p.d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(head));
  p.k = has_m ? _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(head, 16))) : p.d;
  __m512i u[4];
  transpose16x4(blk + kQh + 4, off, u);
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  for (int j = 0; j < 4; ++j) {
    p.q[j] = _mm512_or_si512(_mm512_and_si512(u[j], low4), high_bits(qh, j));
    p.q[4 + j] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(u[j], 4), low4), high_bits(qh, 4 + j));
  }
}

struct Q5_0A {
  using Block = BlockQ5_0;
  static constexpr bool custom = true, halves = false, has_k = true, biased = false;
  static constexpr int n_start = 0, kBytes32 = 22;
  struct State {};
  static void pack(const uint8_t* rows, int64_t b, const int32_t* off, __m512i offs, Packed& p, State&) {
    pack_5bit<Block, 2>(rows + b * 22, off, offs, p, false);
  }
};
struct Q5_1A {
  using Block = BlockQ5_1;
  static constexpr bool custom = true, halves = false, has_k = true, biased = false;
  static constexpr int n_start = 0, kBytes32 = 24;
  struct State {};
  static void pack(const uint8_t* rows, int64_t b, const int32_t* off, __m512i offs, Packed& p, State&) {
    pack_5bit<Block, 4>(rows + b * 24, off, offs, p, true);
  }
};

// Q4_K / Q5_K: block b is sub-block b % 8 of super-block b / 8. At its first
// sub-block a super-block's scales are gathered and, every two sub-blocks, the
// 32 bytes of nibbles they share transposed; the state keeps them.
template <bool kFive>
struct QKA {
  using Block = BlockQ4_K;  // Q5_K's head is the same
  static constexpr bool custom = true, halves = false, has_k = true, biased = false;
  static constexpr int kBlock = kFive ? 176 : 144, kQs = kFive ? 48 : 16;
  static constexpr int n_start = 0, kBytes32 = kBlock / 8;
  struct State {
    __m512 d, dmin;
    __m512i s0, s1, s2;  // scale bytes 0-3, 4-7, 8-11
    __m512i u[8];        // the current pair's nibble bytes, transposed
    __m512i h[8];        // Q5_K: qh, transposed
  };
  static void pack(const uint8_t* rows, int64_t b, const int32_t* off, __m512i offs, Packed& p, State& st) {
    const uint8_t* blk = rows + (b / 8) * kBlock;
    const int j = static_cast<int>(b % 8);
    if (j == 0) {
      const __m512i head = _mm512_i32gather_epi32(offs, blk, 1);
      st.d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(head));
      st.dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(head, 16)));
      st.s0 = _mm512_i32gather_epi32(offs, blk + 4, 1);
      st.s1 = _mm512_i32gather_epi32(offs, blk + 8, 1);
      st.s2 = _mm512_i32gather_epi32(offs, blk + 12, 1);
      if constexpr (kFive) {
        transpose16x4(blk + 16, off, st.h);
        transpose16x4(blk + 32, off, st.h + 4);
      }
    }
    if (j % 2 == 0) {
      transpose16x4(blk + kQs + 32 * (j / 2), off, st.u);
      transpose16x4(blk + kQs + 32 * (j / 2) + 16, off, st.u + 4);
    }
    // k_scale_min on sixteen lanes.
    const __m512i m6 = _mm512_set1_epi32(63), m4 = _mm512_set1_epi32(15), m2 = _mm512_set1_epi32(3);
    __m512i sc, mn;
    if (j < 4) {
      sc = _mm512_and_si512(_mm512_srli_epi32(st.s0, 8 * j), m6);
      mn = _mm512_and_si512(_mm512_srli_epi32(st.s1, 8 * j), m6);
    } else {
      const int k = 8 * (j - 4);
      const __m512i c = _mm512_srli_epi32(st.s2, k);
      sc = _mm512_or_si512(_mm512_and_si512(c, m4),
                           _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(st.s0, k + 6), m2), 4));
      mn = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(c, 4), m4),
                           _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(st.s1, k + 6), m2), 4));
    }
    p.d = _mm512_mul_ps(st.d, _mm512_cvtepi32_ps(sc));
    p.k = _mm512_mul_ps(st.dmin, _mm512_cvtepi32_ps(mn));
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    for (int i = 0; i < 8; ++i) {
      __m512i q = _mm512_and_si512(j % 2 ? _mm512_srli_epi16(st.u[i], 4) : st.u[i], low4);
      if constexpr (kFive)  // bit j of each qh byte to bit 4
        q = _mm512_or_si512(q, _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(st.h[i], j),
                                                                  _mm512_set1_epi8(1)), 4));
      p.q[i] = q;
    }
  }
};
using Q4_KA = QKA<false>;
using Q5_KA = QKA<true>;

// Q6_K: block b = 4n + k is elements 128n + 32k .. of super-block b / 8; the
// state keeps the 64 ql and 32 qh bytes of each half super-block, transposed,
// and the scales. p.d, p.k: the scales of the block's two halves of 16.
struct Q6_KA {
  using Block = BlockQ6_K;
  static constexpr bool custom = true, halves = true, has_k = false, biased = false;
  static constexpr int n_start = 2, kBytes32 = 26;
  struct State {
    __m512 d;
    __m512i sc[4];  // scale bytes 4i..4i+3
    __m512i ql[16], qh[8];
  };
  static void pack(const uint8_t* rows, int64_t b, const int32_t* off, __m512i offs, Packed& p, State& st) {
    const uint8_t* blk = rows + (b / 8) * 210;
    const int j = static_cast<int>(b % 8), n = j / 4, k = j % 4;
    if (j == 0) {
      // d is the block's last two bytes: gathered with the two scales before them.
      st.d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_i32gather_epi32(offs, blk + 206, 1), 16)));
      for (int i = 0; i < 4; ++i) st.sc[i] = _mm512_i32gather_epi32(offs, blk + 192 + 4 * i, 1);
    }
    if (k == 0) {
      for (int i = 0; i < 4; ++i) transpose16x4(blk + 64 * n + 16 * i, off, st.ql + 4 * i);
      transpose16x4(blk + 128 + 32 * n, off, st.qh);
      transpose16x4(blk + 128 + 32 * n + 16, off, st.qh + 4);
    }
    // Scales 2j and 2j + 1: bytes 2 (j % 2) and 2 (j % 2) + 1 of st.sc[j / 2], sign-extended.
    const __m512i w = st.sc[j / 2];
    const int sh = 16 * (j % 2);
    const __m512i s_lo = _mm512_srai_epi32(_mm512_slli_epi32(w, 24 - sh), 24);
    const __m512i s_hi = _mm512_srai_epi32(_mm512_slli_epi32(w, 16 - sh), 24);
    p.d = _mm512_mul_ps(st.d, _mm512_cvtepi32_ps(s_lo));
    p.k = _mm512_mul_ps(st.d, _mm512_cvtepi32_ps(s_hi));
    const __m512i low4 = _mm512_set1_epi8(0x0f), top2 = _mm512_set1_epi8(0x30);
    const __m512i* ql = st.ql + 8 * (k % 2);
    for (int i = 0; i < 8; ++i) {
      const __m512i lo = _mm512_and_si512(k < 2 ? ql[i] : _mm512_srli_epi16(ql[i], 4), low4);
      // bits 2k, 2k+1 of qh to bits 4, 5 (shifted within 16-bit lanes; the mask drops what crosses bytes)
      const __m512i hb = _mm512_and_si512(_mm512_slli_epi16(_mm512_srli_epi16(st.qh[i], 2 * k), 4), top2);
      p.q[i] = _mm512_or_si512(lo, hb);
    }
  }
};

template <class W>
inline void pack_at(const uint8_t* rows, int64_t b, const int32_t* off, __m512i offs, Packed& p,
                    typename W::State& st) {
  if constexpr (W::custom)
    W::pack(rows, b, off, offs, p, st);
  else
    pack_block<W>(rows + b * static_cast<int64_t>(sizeof(typename W::Block)), off, offs, p);
}

inline __m512i bcast4(const int8_t* p) {
  int v;
  __builtin_memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// Block b of sixteen rows (p) against T tokens from token t0 (a multiple of 4):
// sum[i] += float(dot) * (d_w * d_a) and corr[i] += k_w * c, each rounded like
// the scalar kernel's. start[t * nb + b] is the accumulator's start for biased types.
template <class W, int T>
inline void block_x_tokens(const Packed& p, const ActTile* xq, int64_t nb, int64_t b, int64_t t0, const int32_t* start,
                           __m512 sum[T], __m512 corr[T]) {
  const ActTile* tiles = xq + (t0 / kActTileTokens) * nb + b;
  // Unrolled, so that the T sums stay in registers.
#pragma GCC unroll 8
  for (int i = 0; i < T; ++i) {
    const ActTile& a = tiles[(i / kActTileTokens) * nb];
    const int s = i % kActTileTokens;
    if constexpr (W::halves) {
      // Q6_K: each half of 16 has its own scale (p.d, then p.k), low half added first.
      const int32_t* st = start + ((t0 + i) * nb + b) * 2;
      __m512i lo = _mm512_set1_epi32(st[0]), hi = _mm512_set1_epi32(st[1]);
      for (int j = 0; j < 4; ++j) lo = _mm512_dpbusd_epi32(lo, p.q[j], bcast4(a.q[s] + 4 * j));
      for (int j = 4; j < 8; ++j) hi = _mm512_dpbusd_epi32(hi, p.q[j], bcast4(a.q[s] + 4 * j));
      const __m512 ad = _mm512_set1_ps(a.d[s]);
      sum[i] = _mm512_add_ps(sum[i], _mm512_mul_ps(_mm512_cvtepi32_ps(lo), _mm512_mul_ps(p.d, ad)));
      sum[i] = _mm512_add_ps(sum[i], _mm512_mul_ps(_mm512_cvtepi32_ps(hi), _mm512_mul_ps(p.k, ad)));
      continue;
    }
    __m512i acc = W::n_start ? _mm512_set1_epi32(start[(t0 + i) * nb + b]) : _mm512_setzero_si512();
    for (int j = 0; j < 8; ++j) acc = _mm512_dpbusd_epi32(acc, p.q[j], bcast4(a.q[s] + 4 * j));
    const __m512 scale = _mm512_mul_ps(p.d, _mm512_set1_ps(a.d[s]));
    sum[i] = _mm512_add_ps(sum[i], _mm512_mul_ps(_mm512_cvtepi32_ps(acc), scale));
    if constexpr (W::has_k) corr[i] = _mm512_add_ps(corr[i], _mm512_mul_ps(p.k, _mm512_set1_ps(a.c[s])));
  }
}

// Sixteen packed rows x T tokens from token t0, into y[(t0 + i) * ldy + lane]
// for the lanes in `mask`.
template <class W, int T>
void rows_x_tokens(const Packed* pk, int64_t nb, const ActTile* xq, int64_t t0, const int32_t* start, float* y,
                   int64_t ldy, __mmask16 mask) {
  __m512 sum[T], corr[T];
  for (int i = 0; i < T; ++i) sum[i] = corr[i] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) block_x_tokens<W, T>(pk[b], xq, nb, b, t0, start, sum, corr);
  for (int i = 0; i < T; ++i) _mm512_mask_storeu_ps(y + (t0 + i) * ldy, mask, _mm512_add_ps(sum[i], corr[i]));
}

// While block b of a row group is packed, the matching share of the next
// group's weights (nullptr: none) is requested, so that it arrives in time:
// a single token is bound by reading the weights.
template <class W>
inline void prefetch_share(const uint8_t* next, int64_t b) {
  constexpr int64_t share = kRows * static_cast<int64_t>(W::kBytes32);
  if (next)
    for (int64_t o = b * share; o < (b + 1) * share; o += 64)
      _mm_prefetch(reinterpret_cast<const char*>(next + o), _MM_HINT_T0);
}

// Up to kTokens tokens (decode, a verify step, a small batch): each block is
// packed in registers and used at once for every token, which costs less than
// packing the group into scratch to read it back once.
template <class W, int T>
void rows_x_few(const uint8_t* rows, const int32_t* off, int64_t nb, const ActTile* xq, const int32_t* start,
                float* y, int64_t ldy, __mmask16 mask, const uint8_t* next) {
  const __m512i offs = _mm512_load_si512(off);
  typename W::State st;
  __m512 sum[T], corr[T];
  for (int i = 0; i < T; ++i) sum[i] = corr[i] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    prefetch_share<W>(next, b);
    Packed p;
    pack_at<W>(rows, b, off, offs, p, st);
    block_x_tokens<W, T>(p, xq, nb, b, 0, start, sum, corr);
  }
  for (int i = 0; i < T; ++i) _mm512_mask_storeu_ps(y + i * ldy, mask, _mm512_add_ps(sum[i], corr[i]));
}

// Calls f(std::integral_constant<int, T>) with T = n for n from 1 to 7, else kTokens:
// a kernel's token count as a constant, so that its sums stay in registers.
template <class F>
inline void with_tokens(int n, F&& f) {
  switch (n) {
    case 1: return f(std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, 2>{});
    case 3: return f(std::integral_constant<int, 3>{});
    case 4: return f(std::integral_constant<int, 4>{});
    case 5: return f(std::integral_constant<int, 5>{});
    case 6: return f(std::integral_constant<int, 6>{});
    case 7: return f(std::integral_constant<int, 7>{});
    default: return f(std::integral_constant<int, kTokens>{});
  }
}

// Per-thread scratch for the packed rows and the activation sums, kept between
// calls (a thread-pool worker runs many).
struct Scratch {
  void* p = nullptr;
  size_t bytes = 0;
  ~Scratch() { free(p); }
  void* get(size_t want) {
    if (want > bytes) {
      free(p);
      bytes = (want + 4095) / 4096 * 4096;
      p = aligned_alloc(64, bytes);
      if (!p) abort();
    }
    return p;
  }
};

template <class W>
void quant_matmul_typed(const WeightView& w, const ActTile* xq, int64_t n_tokens, float* y, int64_t ldy,
                        int64_t r0, int64_t r1) {
  static thread_local Scratch scratch;
  const int64_t nb = w.cols / kQuantBlock;
  const size_t packed_bytes = static_cast<size_t>(nb) * sizeof(Packed);
  auto* mem = static_cast<uint8_t*>(scratch.get(packed_bytes + W::n_start * n_tokens * nb * 4));
  Packed* pk = reinterpret_cast<Packed*>(mem);
  int32_t* start = reinterpret_cast<int32_t*>(mem + packed_bytes);
  if constexpr (W::biased) {
    // -128 * sum(a) per token and block: sad against zero sums a + 128 in groups of 8.
    const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
    for (int64_t t = 0; t < n_tokens; ++t)
      for (int64_t b = 0; b < nb; ++b) {
        const int8_t* q = xq[(t / kActTileTokens) * nb + b].q[t % kActTileTokens];
        const __m256i v = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)), bias);
        const __m256i s4 = _mm256_sad_epu8(v, _mm256_setzero_si256());
        const __m128i s2 = _mm_add_epi64(_mm256_castsi256_si128(s4), _mm256_extracti128_si256(s4, 1));
        const int sum = _mm_cvtsi128_si32(_mm_add_epi64(s2, _mm_unpackhi_epi64(s2, s2))) - 32 * 128;
        start[t * nb + b] = -128 * sum;
      }
  }
  if constexpr (W::halves) {
    // Q6_K's 6-bit values enter vpdpbusd unsigned: -32 * sum(a) per half undoes their offset of 32.
    for (int64_t t = 0; t < n_tokens; ++t)
      for (int64_t b = 0; b < nb; ++b) {
        const int8_t* q = xq[(t / kActTileTokens) * nb + b].q[t % kActTileTokens];
        int lo = 0, hi = 0;
        for (int j = 0; j < 16; ++j) lo += q[j], hi += q[16 + j];
        start[(t * nb + b) * 2] = -32 * lo;
        start[(t * nb + b) * 2 + 1] = -32 * hi;
      }
  }
  const auto* base = static_cast<const uint8_t*>(w.data);
  for (int64_t r = r0; r < r1; r += kRows) {
    // A short last group repeats its last row in the missing lanes and stores only the real ones.
    const int n = r1 - r < kRows ? static_cast<int>(r1 - r) : kRows;
    alignas(64) int32_t off[kRows];
    for (int i = 0; i < kRows; ++i) off[i] = static_cast<int32_t>((i < n ? i : n - 1) * w.row_stride);
    const __mmask16 mask = static_cast<__mmask16>((1u << n) - 1);
    const uint8_t* rows = base + r * w.row_stride;
    const uint8_t* next = r + kRows < r1 ? rows + kRows * w.row_stride : nullptr;
    if (n_tokens <= kFewTokens) {
      with_tokens(static_cast<int>(n_tokens), [&](auto t) {
        rows_x_few<W, decltype(t)::value>(rows, off, nb, xq, start, y + r, ldy, mask, next);
      });
      continue;
    }
    // Several tokens: the group is packed once into scratch (in L1) and read for every token tile.
    const __m512i offs = _mm512_load_si512(off);
    typename W::State st;
    for (int64_t b = 0; b < nb; ++b) {
      prefetch_share<W>(next, b);
      pack_at<W>(rows, b, off, offs, pk[b], st);
    }
    for (int64_t t0 = 0; t0 < n_tokens; t0 += kTokens) {
      const int tn = n_tokens - t0 < kTokens ? static_cast<int>(n_tokens - t0) : kTokens;
      with_tokens(tn, [&](auto t) { rows_x_tokens<W, decltype(t)::value>(pk, nb, xq, t0, start, y + r, ldy, mask); });
    }
  }
}

void matmul_quant(const WeightView& w, const ActTile* xq, int64_t n_tokens, float* y, int64_t ldy, int64_t r0,
                  int64_t r1) {
  switch (w.type) {
    case DType::Q4_0: return quant_matmul_typed<Q4_0A>(w, xq, n_tokens, y, ldy, r0, r1);
    case DType::Q4_1: return quant_matmul_typed<Q4_1A>(w, xq, n_tokens, y, ldy, r0, r1);
    case DType::Q8_0: return quant_matmul_typed<Q8_0A>(w, xq, n_tokens, y, ldy, r0, r1);
    case DType::Q5_0: return quant_matmul_typed<Q5_0A>(w, xq, n_tokens, y, ldy, r0, r1);
    case DType::Q5_1: return quant_matmul_typed<Q5_1A>(w, xq, n_tokens, y, ldy, r0, r1);
    case DType::Q4_K: return quant_matmul_typed<Q4_KA>(w, xq, n_tokens, y, ldy, r0, r1);
    case DType::Q5_K: return quant_matmul_typed<Q5_KA>(w, xq, n_tokens, y, ldy, r0, r1);
    case DType::Q6_K: return quant_matmul_typed<Q6_KA>(w, xq, n_tokens, y, ldy, r0, r1);
    default: return kScalarKernels.matmul_quant(w, xq, n_tokens, y, ldy, r0, r1);  // types not ported here
  }
}

// ---- common -----------------------------------------------------------------

// The first n (<= 16) lanes: the tails of the loops below go through masks.
inline __mmask16 first_lanes(int64_t n) { return static_cast<__mmask16>((1u << n) - 1); }

inline __m256 lo8(__m512 v) { return _mm512_castps512_ps256(v); }
inline __m256 hi8(__m512 v) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)); }

// Sum of 16 floats, each widened to double: 16 x float -> 2 x 8 doubles.
inline __m512d add_widened(__m512d acc, __m512 v) {
  return _mm512_add_pd(acc, _mm512_add_pd(_mm512_cvtps_pd(lo8(v)), _mm512_cvtps_pd(hi8(v))));
}

// exp(x), exp256 of kernels_avx2.cpp on 16 lanes with the same steps and
// constants (so the same values): clamp to [-87, 88], 2^n * e^r with |r| <=
// ln2/2, degree-7 Taylor polynomial; scalef multiplies by 2^n exactly as the
// AVX2 exponent-bits product does.
inline __m512 exp512(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// ---- float-weight matmul (F32, F16, BF16) -----------------------------------
//
// Few tokens (decode): each row is dotted with each token directly, 16 lanes
// along k, up to 4 rows x 4 tokens per pass, reduced at the end.
// Many tokens (prefill): sixteen rows at a time are repacked once into the
// thread's scratch, k-major (entry k holds weight k of the sixteen rows, as
// floats), and reused by every token: acc[t] += entry k * broadcast(x_t[k])
// keeps kPanelTokens tokens x 32 rows in registers with no reductions, and
// each token's results for a row group go to y in one store. Each (row, token)
// sum runs over k in order in one lane, so a result does not depend on how
// the rows are split between threads or grouped.
//
// F16 and BF16 weights are widened to floats, exactly; the activations stay
// floats. (AVX512_BF16's vdpbf16ps, with activations rounded to bf16 as
// llama.cpp does, measured no faster here and moved the logits of the BF16 HF
// fixture from transformers' by 0.13, ten times the float path's 1.2e-2.)

constexpr int64_t kPanelMinTokens = 16;  // fewer tokens: repacking costs more than it saves
constexpr int kPanelTokens = 8;          // x two panels of 16 rows: 16 accumulators
constexpr int64_t kPanelBlockFloats = 1 << 17;  // the repacked rows of one block: 512 KiB, kept in L2

inline __mmask16 lanes_left(int64_t n) { return n >= 16 ? __mmask16(0xffff) : n <= 0 ? __mmask16(0) : first_lanes(n); }

// Tile<R, T>::run(a...) with the compile-time R = r in [1, MaxR] and T = t in [1, MaxT].
template <template <int, int> class Tile, int MaxR, int MaxT, int R = 1, int T = 1, class... A>
void with_shape(int r, int t, A... a) {
  if constexpr (R < MaxR)
    if (r > R) return with_shape<Tile, MaxR, MaxT, R + 1, T>(r, t, a...);
  if constexpr (T < MaxT)
    if (t > T) return with_shape<Tile, MaxR, MaxT, R, T + 1>(r, t, a...);
  Tile<R, T>::run(a...);
}

// Rows of one weight type: 16 weights from k as floats (`m`: the lanes inside
// the row); for the 16-bit types, a weight in a lane's low 16 bits widened.
struct F32R {
  static constexpr int kBytes = 4;
  static __m512 load16(const uint8_t* row, int64_t k, __mmask16 m) {
    return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(row) + k);
  }
  static __m512 load16(const uint8_t* row, int64_t k) { return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + k); }
};
struct F16R {
  static constexpr int kBytes = 2;
  static __m512 load16(const uint8_t* row, int64_t k, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, reinterpret_cast<const uint16_t*>(row) + k));
  }
  static __m512 load16(const uint8_t* row, int64_t k) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * k)));
  }
  static __m512 widen(__m512i h) { return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h)); }
};
struct BF16R {
  static constexpr int kBytes = 2;
  static __m512 load16(const uint8_t* row, int64_t k, __mmask16 m) {
    return widen(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, reinterpret_cast<const uint16_t*>(row) + k)));
  }
  static __m512 load16(const uint8_t* row, int64_t k) {
    return widen(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * k))));
  }
  static __m512 widen(__m512i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(h, 16)); }
};

// ---- few tokens: dots

// The sixteen sums of a[4 r + t] (r, t < 4): 128-bit lane t of the result
// holds r = 0..3, so token t's four rows are one store. Fifteen adds and
// thirty shuffles, where sixteen reductions of one vector each take about
// eight operations (at 8 tokens of a 576-wide row, a fifth of the FMAs).
inline __m512 sum16(const __m512 (&a)[16]) {
  __m512 b[8], c[4], d[2];
  for (int j = 0; j < 8; ++j)  // lanes 0-7: a[2j]'s halves added; 8-15: a[2j+1]'s
    b[j] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * j], a[2 * j + 1], 0x44),
                         _mm512_shuffle_f32x4(a[2 * j], a[2 * j + 1], 0xee));
  for (int j = 0; j < 4; ++j)  // 128-bit lane k: four partial sums of a[4j + k]
    c[j] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * j], b[2 * j + 1], 0x88),
                         _mm512_shuffle_f32x4(b[2 * j], b[2 * j + 1], 0xdd));
  for (int j = 0; j < 2; ++j)  // lane k: two of a[8j + k], then two of a[8j + 4 + k]
    d[j] = _mm512_add_ps(_mm512_shuffle_ps(c[2 * j], c[2 * j + 1], 0x44),
                         _mm512_shuffle_ps(c[2 * j], c[2 * j + 1], 0xee));
  // lane k: a[k], a[4 + k], a[8 + k], a[12 + k]
  return _mm512_add_ps(_mm512_shuffle_ps(d[0], d[1], 0x88), _mm512_shuffle_ps(d[0], d[1], 0xdd));
}

// y[t * ldy + r] = row r . token t for R rows and T tokens, in f32. `next`
// (or nullptr): the rows of the tile after this one, requested from memory
// while this one runs (one token is bound by reading the weights; the hardware
// prefetcher alone left the F16 and BF16 rows at 19 GB/s where the quantized
// rows, prefetched so, read 24).
template <class L>
struct DotF32 {
  template <int R, int T>
  struct Tile {
    static void run(const uint8_t* rows, size_t stride, const float* x, int64_t cols, float* y, int64_t ldy,
                    const uint8_t* next) {
      __m512 acc[R][T];
      for (int r = 0; r < R; ++r)
        for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
      // Whole steps with plain loads, then a masked tail: with masked loads in
      // the loop, g++ 12 stored every accumulator to the stack on each step
      // (8 tokens ran at a third of the speed).
      int64_t k = 0;
      for (; k + 16 <= cols; k += 16) {
        if (next != nullptr && (k * L::kBytes) % 64 == 0)
          for (int r = 0; r < R; ++r) _mm_prefetch(reinterpret_cast<const char*>(next + r * stride + k * L::kBytes), _MM_HINT_T0);
        __m512 w[R];
        for (int r = 0; r < R; ++r) w[r] = L::load16(rows + r * stride, k);
        for (int t = 0; t < T; ++t) {
          const __m512 xv = _mm512_loadu_ps(x + t * cols + k);
          for (int r = 0; r < R; ++r) acc[r][t] = _mm512_fmadd_ps(w[r], xv, acc[r][t]);
        }
      }
      if (k < cols) {
        const __mmask16 m = lanes_left(cols - k);
        __m512 w[R];
        for (int r = 0; r < R; ++r) w[r] = L::load16(rows + r * stride, k, m);
        for (int t = 0; t < T; ++t) {
          const __m512 xv = _mm512_maskz_loadu_ps(m, x + t * cols + k);
          for (int r = 0; r < R; ++r) acc[r][t] = _mm512_fmadd_ps(w[r], xv, acc[r][t]);
        }
      }
      if constexpr (R == 4 && T == 4) {
        const __m512 sums = sum16(reinterpret_cast<const __m512(&)[16]>(acc));
        // Spelled out: the lane index must be an immediate even where -O1 does not unroll.
        _mm_storeu_ps(y, _mm512_castps512_ps128(sums));
        _mm_storeu_ps(y + ldy, _mm512_extractf32x4_ps(sums, 1));
        _mm_storeu_ps(y + 2 * ldy, _mm512_extractf32x4_ps(sums, 2));
        _mm_storeu_ps(y + 3 * ldy, _mm512_extractf32x4_ps(sums, 3));
      } else {
        for (int r = 0; r < R; ++r)
          for (int t = 0; t < T; ++t) y[t * ldy + r] = _mm512_reduce_add_ps(acc[r][t]);
      }
    }
  };
};

template <template <int, int> class Tile>
void dot_rows(const WeightView& w, const float* x, int64_t n_tokens, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  constexpr int kRowsMax = 4, kTokensMax = 4;
  const auto* base = static_cast<const uint8_t*>(w.data);
  // Rows outside, tokens inside: past four tokens a tile's rows are read from
  // memory once and from L1 for the next four (tokens outside read every row
  // from memory again for each four).
  for (int64_t r = r0; r < r1; r += kRowsMax) {
    const int rn = static_cast<int>(r1 - r < kRowsMax ? r1 - r : kRowsMax);
    const uint8_t* next = r + 2 * kRowsMax <= r1 ? base + (r + kRowsMax) * w.row_stride : nullptr;
    for (int64_t t0 = 0; t0 < n_tokens; t0 += kTokensMax) {
      const int tn = static_cast<int>(n_tokens - t0 < kTokensMax ? n_tokens - t0 : kTokensMax);
      with_shape<Tile, kRowsMax, kTokensMax>(rn, tn, base + r * w.row_stride, w.row_stride, x + t0 * w.cols,
                                             w.cols, y + t0 * ldy + r, ldy, t0 == 0 ? next : nullptr);
    }
  }
}

// ---- many tokens: panels

// Byte offsets of sixteen rows from the first; rows past n repeat the last
// one (their lanes are computed and never stored).
inline void panel_offsets(size_t stride, int n, int32_t off[16]) {
  for (int r = 0; r < 16; ++r) off[r] = static_cast<int32_t>((r < n ? r : n - 1) * stride);
}

// A panel of sixteen repacked rows (pk, panels `pstride` floats apart) x T
// tokens, P panels at a time: acc[p][t] lane r += entry k of panel p times
// xs[t * xstride + k] broadcast, for k < cols. Stores the lanes of mask[p] at
// y[t * ldy + 16 p].
template <int P, int T>
struct PanelTile {
  static void run(const float* pk, int64_t pstride, const float* xs, int64_t xstride, int64_t cols, float* y,
                  int64_t ldy, const __mmask16* mask) {
    __m512 acc[P][T];
    for (int p = 0; p < P; ++p)
      for (int t = 0; t < T; ++t) acc[p][t] = _mm512_setzero_ps();
    for (int64_t k = 0; k < cols; ++k) {
      __m512 w[P];
      for (int p = 0; p < P; ++p) w[p] = _mm512_loadu_ps(pk + p * pstride + k * 16);
      for (int t = 0; t < T; ++t) {
        const __m512 xb = _mm512_set1_ps(xs[t * xstride + k]);
        for (int p = 0; p < P; ++p) acc[p][t] = _mm512_fmadd_ps(w[p], xb, acc[p][t]);
      }
    }
    for (int p = 0; p < P; ++p)
      for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(y + t * ldy + 16 * p, mask[p], acc[p][t]);
  }
};

// Panels of floats (any weight type L), multiplied with the activations as they are.
template <class L>
struct PanelF32 {
  // p[k * 16 + r] = weight k of row r (n rows valid), for k < cols.
  static void pack(const uint8_t* rows, size_t stride, int n, int64_t cols, float* p) {
    int32_t off[16];
    panel_offsets(stride, n, off);
    constexpr int kStep = 16 / L::kBytes;  // the weights in 16 bytes of a row
    int64_t k = 0;
    for (; k + kStep <= cols; k += kStep) {
      __m512i u[4];  // u[j] lane r: bytes 4j..4j+3 of row r's 16 from weight k
      transpose16x4(rows + k * L::kBytes, off, u);
      for (int j = 0; j < 4; ++j) {
        if constexpr (L::kBytes == 4) {
          _mm512_storeu_ps(p + (k + j) * 16, _mm512_castsi512_ps(u[j]));
        } else {  // weights k + 2j (low half) and k + 2j + 1 (high half)
          _mm512_storeu_ps(p + (k + 2 * j) * 16, L::widen(_mm512_and_si512(u[j], _mm512_set1_epi32(0xffff))));
          _mm512_storeu_ps(p + (k + 2 * j + 1) * 16, L::widen(_mm512_srli_epi32(u[j], 16)));
        }
      }
    }
    for (; k < cols; ++k)  // the row's last few weights
      for (int r = 0; r < 16; ++r) p[k * 16 + r] = _mm512_cvtss_f32(L::load16(rows + off[r], k, 1));
  }
};

// Rows per block: as many panels as fit kPanelBlockFloats, an even number, at least two.
inline int64_t panel_block_rows(int64_t pstride) {
  const int64_t panels = kPanelBlockFloats / pstride / 2 * 2;
  return 16 * (panels > 2 ? panels : 2);
}

int64_t panel_scratch(int64_t cols) {
  const int64_t pstride = 16 * cols;
  return panel_block_rows(pstride) / 16 * pstride;
}

// Rows [r0, r1) in blocks: each block's panels packed once, then every token
// tile against them, two panels at a time.
template <class K>
void panel_rows(const WeightView& w, const float* x, int64_t n_tokens, float* y, int64_t ldy, int64_t r0, int64_t r1,
                float* scratch) {
  const auto* base = static_cast<const uint8_t*>(w.data);
  const int64_t pstride = 16 * w.cols, block = panel_block_rows(pstride);
  for (int64_t b0 = r0; b0 < r1; b0 += block) {
    const int64_t b1 = b0 + block < r1 ? b0 + block : r1;
    const int64_t np = (b1 - b0 + 15) / 16;
    for (int64_t i = 0; i < np; ++i) {
      const int64_t n = b1 - b0 - 16 * i;
      K::pack(base + (b0 + 16 * i) * w.row_stride, w.row_stride, static_cast<int>(n < 16 ? n : 16), w.cols,
              scratch + i * pstride);
    }
    for (int64_t t0 = 0; t0 < n_tokens; t0 += kPanelTokens) {
      const int tn = static_cast<int>(n_tokens - t0 < kPanelTokens ? n_tokens - t0 : kPanelTokens);
      for (int64_t i = 0; i < np; i += 2) {
        const __mmask16 mask[2] = {lanes_left(b1 - b0 - 16 * i), lanes_left(b1 - b0 - 16 * (i + 1))};
        with_shape<PanelTile, 2, kPanelTokens>(i + 1 < np ? 2 : 1, tn, scratch + i * pstride, pstride,
                                               x + t0 * w.cols, w.cols, w.cols, y + t0 * ldy + b0 + 16 * i, ldy,
                                               static_cast<const __mmask16*>(mask));
      }
    }
  }
}

template <class L>
void float_matmul_typed(const WeightView& w, const float* x, int64_t n_tokens, float* y, int64_t ldy, int64_t r0,
                        int64_t r1, float* scratch) {
  if (n_tokens < kPanelMinTokens) return dot_rows<DotF32<L>::template Tile>(w, x, n_tokens, y, ldy, r0, r1);
  panel_rows<PanelF32<L>>(w, x, n_tokens, y, ldy, r0, r1, scratch);
}

int64_t matmul_float_scratch(const WeightView& w, int64_t n_tokens) {
  return n_tokens < kPanelMinTokens ? 0 : panel_scratch(w.cols);
}

void matmul_float(const WeightView& w, const float* x, int64_t n_tokens, float* y, int64_t ldy, int64_t r0,
                  int64_t r1, float* scratch) {
  switch (w.type) {
    case DType::F16: return float_matmul_typed<F16R>(w, x, n_tokens, y, ldy, r0, r1, scratch);
    case DType::BF16: return float_matmul_typed<BF16R>(w, x, n_tokens, y, ldy, r0, r1, scratch);
    default: return float_matmul_typed<F32R>(w, x, n_tokens, y, ldy, r0, r1, scratch);
  }
}

// ---- scaled-weight matmul (FP8 block-scaled, MXFP4) ----------------------------
//
// As kernels_avx2.cpp's, 16 lanes wide, the ragged FP8 block's tail through masks.

// The first n of 16 e4m3fn bytes as floats / 256: sign to bit 15, exponent and
// mantissa to bits 13..7 make a half worth exactly 2^-8 of the byte, subnormals
// included; NaN (0x7f / 0xff) patched in by mask where the block may hold one.
// (Floats worth 2^-120 of it would skip the half conversion, but products of
// such tiny floats are subnormal, and take the CPU's slow path.)
inline __m512 e4m3x16(const uint8_t* p, __mmask16 m, bool may_be_nan) {
  const __m128i b = _mm_maskz_loadu_epi8(m, p);
  const __m256i w = _mm256_cvtepu8_epi16(b);
  // Bitwise select (imm 0xe4: c ? a : b): the sign from w << 8, the rest from (w << 9) >> 2.
  const __m256i h = _mm256_ternarylogic_epi32(_mm256_slli_epi16(w, 8), _mm256_srli_epi16(_mm256_slli_epi16(w, 9), 2),
                                              _mm256_set1_epi16(-0x8000), 0xe4);
  const __m512 v = _mm512_cvtph_ps(h);
  if (!may_be_nan) return v;
  const __mmask16 nan = _mm_cmpeq_epi8_mask(_mm_or_si128(b, _mm_set1_epi8(static_cast<char>(0x80))), _mm_set1_epi8(-1));
  return _mm512_mask_mov_ps(v, nan, _mm512_set1_ps(__builtin_nanf("")));
}

// Whether any of the n (<= 128) e4m3fn bytes at p is NaN: one test per block
// instead of one per 16 bytes.
inline bool any_e4m3_nan(const uint8_t* p, int64_t n) {
  const auto lanes = [](int64_t k) {
    return k >= 64 ? ~__mmask64(0) : k <= 0 ? __mmask64(0) : (__mmask64(1) << k) - 1;
  };
  const __m512i sign = _mm512_set1_epi8(static_cast<char>(0x80)), ones = _mm512_set1_epi8(-1);
  const __mmask64 lo = _mm512_cmpeq_epi8_mask(_mm512_or_si512(_mm512_maskz_loadu_epi8(lanes(n), p), sign), ones);
  const __mmask64 hi =
      _mm512_cmpeq_epi8_mask(_mm512_or_si512(_mm512_maskz_loadu_epi8(lanes(n - 64), p + 64), sign), ones);
  return (lo | hi) != 0;
}

template <int T>
void fp8_row(const ScaledWeightView& w, int64_t r, const float* x, float* y, int64_t ldy) {
  const auto* q = static_cast<const uint8_t*>(w.data) + r * w.cols;
  const __m512 undo = _mm512_set1_ps(256.0f);
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t c0 = 0; c0 < w.cols; c0 += kFp8BlockSize) {
    const int64_t c1 = c0 + kFp8BlockSize < w.cols ? c0 + kFp8BlockSize : w.cols;
    __m512 part[T];
    for (int t = 0; t < T; ++t) part[t] = _mm512_setzero_ps();
    const bool nan = any_e4m3_nan(q + c0, c1 - c0);
    int64_t c = c0;
    for (; c + 16 <= c1; c += 16) {
      const __m512 wv = e4m3x16(q + c, 0xffff, nan);
      for (int t = 0; t < T; ++t) part[t] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x + t * w.cols + c), part[t]);
    }
    if (c < c1) {
      const __mmask16 m = first_lanes(c1 - c);
      const __m512 wv = e4m3x16(q + c, m, nan);
      for (int t = 0; t < T; ++t) part[t] = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(m, x + t * w.cols + c), part[t]);
    }
    const __m512 sv = _mm512_set1_ps(scale_at(w, r, c0));
    for (int t = 0; t < T; ++t) acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(part[t], undo), sv, acc[t]);
  }
  for (int t = 0; t < T; ++t) y[t * ldy] = _mm512_reduce_add_ps(acc[t]);
}

// A row's E8M0 scales as floats, 16 at a time (n % 16 == 0 or the tail masked).
inline void e8m0_row(const uint8_t* s, int64_t n, float* out) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lanes_left(n - i);
    const __m512i v = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, s + i));
    __m512i bits = _mm512_slli_epi32(v, 23);
    const __m512i tiny = _mm512_set1_epi32(0x00400000), nan = _mm512_set1_epi32(0x7fc00000);  // 2^-127, NaN
    bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(v, _mm512_setzero_si512()), tiny);
    bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(v, _mm512_set1_epi32(255)), nan);
    _mm512_mask_storeu_ps(out + i, m, _mm512_castsi512_ps(bits));
  }
}

// MXFP4: a block's 16 bytes widened to 16 lanes index a 16-float E2M1 table
// (vpermps reads the index's low 4 bits: the low nibble), then shifted by 4 for
// the high nibbles; x in nibble order. Two blocks per step, in two accumulators.
template <int T>
void mxfp4_row(const ScaledWeightView& w, int64_t r, const float* x, float* y, int64_t ldy) {
  const int64_t nb = w.cols / kMxfp4BlockSize;
  const auto* q = static_cast<const uint8_t*>(w.data) + r * (w.cols / 2);
  constexpr int64_t kMaxBlocks = 512;  // rows up to 16384 in one pass of scales
  float scale[kMaxBlocks];
  const __m512 lut = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f, -1.5f, -2.0f,
                                    -3.0f, -4.0f, -6.0f);
  __m512 acc[2][T];
  for (int t = 0; t < T; ++t) acc[0][t] = acc[1][t] = _mm512_setzero_ps();
  for (int64_t b0 = 0; b0 < nb; b0 += kMaxBlocks) {
    const int64_t b1 = b0 + kMaxBlocks < nb ? b0 + kMaxBlocks : nb;
    e8m0_row(static_cast<const uint8_t*>(w.scales) + r * nb + b0, b1 - b0, scale);
    for (int64_t b = b0; b < b1; ++b) {
      const __m512i codes = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16 * b)));
      const __m512 lo = _mm512_permutexvar_ps(codes, lut);
      const __m512 hi = _mm512_permutexvar_ps(_mm512_srli_epi32(codes, 4), lut);
      const __m512 sv = _mm512_set1_ps(scale[b - b0]);
      for (int t = 0; t < T; ++t) {
        const float* xb = x + t * w.cols + b * kMxfp4BlockSize;
        const __m512 part = _mm512_fmadd_ps(hi, _mm512_loadu_ps(xb + 16), _mm512_mul_ps(lo, _mm512_loadu_ps(xb)));
        acc[b & 1][t] = _mm512_fmadd_ps(part, sv, acc[b & 1][t]);
      }
    }
  }
  for (int t = 0; t < T; ++t) y[t * ldy] = _mm512_reduce_add_ps(_mm512_add_ps(acc[0][t], acc[1][t]));
}

void matmul_scaled(const ScaledWeightView& w, const float* x, int64_t n_tokens, float* y, int64_t ldy, int64_t r0,
                   int64_t r1) {
  static constexpr ScaledRowKernels k{{fp8_row<1>, fp8_row<2>, fp8_row<3>, fp8_row<4>},
                                      {mxfp4_row<1>, mxfp4_row<2>, mxfp4_row<3>, mxfp4_row<4>}};
  scaled_token_tiles(k, w, x, n_tokens, y, ldy, r0, r1);
}

// ---- elementwise ------------------------------------------------------------

// Squares in float, summed in double, like the reference; tails through masks.
void rmsnorm_row(const float* x, const float* weight, float* y, int64_t n, float eps) {
  __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {  // two independent sums: the adds' latency, not their count, bounds this loop
    const __m512 a = _mm512_loadu_ps(x + i), b = _mm512_loadu_ps(x + i + 16);
    s0 = add_widened(s0, _mm512_mul_ps(a, a));
    s1 = add_widened(s1, _mm512_mul_ps(b, b));
  }
  for (; i < n; i += 16) {
    const __m512 a = _mm512_maskz_loadu_ps(first_lanes(n - i < 16 ? n - i : 16), x + i);
    s0 = add_widened(s0, _mm512_mul_ps(a, a));
  }
  const double sum = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / sqrtf(mean + eps);
  const __m512 sc = _mm512_set1_ps(scale);
  for (i = 0; i + 16 <= n; i += 16)
    _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(x + i), sc), _mm512_loadu_ps(weight + i)));
  if (i < n) {
    const __mmask16 m = first_lanes(n - i);
    _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), sc),
                                                  _mm512_maskz_loadu_ps(m, weight + i)));
  }
}

// g / (1 + exp(-g)) * u, the reference's steps; -g flips the sign bit (in the
// integer domain: _mm512_xor_ps is AVX512DQ).
inline __m512 silu_mul16(__m512 g, __m512 u) {
  const __m512 neg = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(g), _mm512_set1_epi32(INT32_MIN)));
  const __m512 e = exp512(neg);
  return _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e)), u);
}

// out = op(gate, up) 16 lanes at a time, the tail masked.
template <class Op>
void gated16(const float* gate, const float* up, float* out, int64_t n, Op op) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, op(_mm512_loadu_ps(gate + i), _mm512_loadu_ps(up + i)));
  if (i < n) {
    const __mmask16 m = first_lanes(n - i);
    _mm512_mask_storeu_ps(out + i, m, op(_mm512_maskz_loadu_ps(m, gate + i), _mm512_maskz_loadu_ps(m, up + i)));
  }
}

void silu_mul(const float* gate, const float* up, float* out, int64_t n) { gated16(gate, up, out, n, silu_mul16); }

// g / (1 + exp(-k (g + 0.044715 g^3))) * u, the scalar kernel's steps.
inline __m512 gelu_mul16(__m512 g, __m512 u) {
  const __m512 g3 = _mm512_mul_ps(_mm512_mul_ps(g, g), g);
  const __m512 inner = _mm512_fmadd_ps(_mm512_set1_ps(0.044715f), g3, g);
  const __m512 e = exp512(_mm512_mul_ps(_mm512_set1_ps(-2.0f * 0.7978845608f), inner));
  return _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e)), u);
}

void gelu_mul(const float* gate, const float* up, float* out, int64_t n) { gated16(gate, up, out, n, gelu_mul16); }

void add(float* y, const float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_add_ps(_mm512_loadu_ps(y + i), _mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 m = first_lanes(n - i);
    _mm512_mask_storeu_ps(y + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, y + i), _mm512_maskz_loadu_ps(m, x + i)));
  }
}

// ---- attention ----------------------------------------------------------------

// Scores: a register holds 8 dimensions of two positions (lanes 0-7 and 8-15),
// against the query's 8 dimensions in both halves. Any head_dim % 8 == 0 works,
// and each score is an 8-lane sum: eight registers reduce to 16 scores in one
// short tree, half the shuffles of full 16-lane sums.
inline __m512 kv_pair(const float* a, const float* b) {
  return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(_mm256_loadu_ps(a))),
                                             _mm256_castps_pd(_mm256_loadu_ps(b)), 1));
}
inline __m512 kv_pair(const uint16_t* a, const uint16_t* b) {
  return _mm512_cvtph_ps(_mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a))),
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), 1));
}
inline __m512 bcast8(const float* q) {
  return _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(q))));
}

// x[0..8): lane 2i + h of the result is the sum of half h (lanes 8h..8h+7) of x[i].
inline __m512 sum_halves8(const __m512* x) {
  __m512 y[4];  // y[m]'s 128-bit lane l: 4 partial sums of half l % 2 of x[2m + l / 2]
  for (int m = 0; m < 4; ++m)
    y[m] = _mm512_add_ps(_mm512_shuffle_f32x4(x[2 * m], x[2 * m + 1], 0x88),
                         _mm512_shuffle_f32x4(x[2 * m], x[2 * m + 1], 0xdd));
  const __m512 z0 = _mm512_add_ps(_mm512_unpacklo_ps(y[0], y[1]), _mm512_unpackhi_ps(y[0], y[1]));
  const __m512 z1 = _mm512_add_ps(_mm512_unpacklo_ps(y[2], y[3]), _mm512_unpackhi_ps(y[2], y[3]));
  // Lane 4l + m: the whole sum of y[m]'s lane l; a 4x4 transpose puts it at 4m + l.
  const __m512d z0d = _mm512_castps_pd(z0), z1d = _mm512_castps_pd(z1);
  const __m512 f = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(z0d, z1d)),
                                 _mm512_castpd_ps(_mm512_unpackhi_pd(z0d, z1d)));
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), f);
}

// Scores of Q queries against the n rows of a chunk in tiles of Q queries x P
// positions: accumulator a * P / 2 + k holds query a against positions 2k and
// 2k + 1, so the reduced tree t holds sums 16t .. 16t + 15 in query-major order.
// Rows past n repeat a valid row; their scores are not stored.
template <int Q, int P, class T>
void chunk_scores(const float* q, int hd, const T* const* krow, int n, float scale, float* s, int64_t ld) {
  static_assert(P == 4 || P == 8 || P == 16, "a query's P scores are a 128-, 256- or 512-bit part of a tree");
  constexpr int K2 = P / 2, NA = Q * K2, NT = (NA + 7) / 8;
  const __m512 sc = _mm512_set1_ps(scale);
  for (int j = 0; j < n; j += P) {
    const T* k[P];
    for (int u = 0; u < P; ++u) k[u] = krow[j + u < n ? j + u : n - 1];
    __m512 acc[NT * 8];
    for (int x = 0; x < NT * 8; ++x) acc[x] = _mm512_setzero_ps();
    for (int d = 0; d < hd; d += 8) {
      __m512 qv[Q];
      for (int a = 0; a < Q; ++a) qv[a] = bcast8(q + a * hd + d);
      for (int kk = 0; kk < K2; ++kk) {
        const __m512 kp = kv_pair(k[2 * kk] + d, k[2 * kk + 1] + d);
        for (int a = 0; a < Q; ++a) acc[a * K2 + kk] = _mm512_fmadd_ps(qv[a], kp, acc[a * K2 + kk]);
      }
    }
    const int valid = n - j < P ? n - j : P;
    const __mmask16 m = first_lanes(valid);
    for (int t = 0; t < NT; ++t) {
      const __m512 f = _mm512_mul_ps(sum_halves8(acc + 8 * t), sc);
      for (int a = 16 * t / P; a < (16 * t + 16) / P && a < Q; ++a) {
        float* dst = s + a * ld + j;
        const int part = a - 16 * t / P;  // the query's P lanes in this tree
        if constexpr (P == 16)
          _mm512_mask_storeu_ps(dst, m, f);
        else if constexpr (P == 8)
          _mm256_mask_storeu_ps(dst, static_cast<__mmask8>(m), part ? hi8(f) : lo8(f));
        else
          _mm_mask_storeu_ps(dst, static_cast<__mmask8>(m), part == 0   ? _mm512_castps512_ps128(f)
                                                            : part == 1 ? _mm512_extractf32x4_ps(f, 1)
                                                            : part == 2 ? _mm512_extractf32x4_ps(f, 2)
                                                                        : _mm512_extractf32x4_ps(f, 3));
      }
    }
  }
}

// Up to four queries in one pass over the chunk (each position's row loaded
// once for all), more in passes of four over rows converted to float.
template <class T>
void chunk_scores_all(const float* q, int nq, int hd, const T* const* krow, int n, float scale, float* s,
                      int64_t ld) {
  int i = 0;
  for (; i + 4 <= nq; i += 4) chunk_scores<4, 8>(q + int64_t(i) * hd, hd, krow, n, scale, s + i * ld, ld);
  switch (nq - i) {
    case 3: return chunk_scores<3, 16>(q + int64_t(i) * hd, hd, krow, n, scale, s + i * ld, ld);
    case 2: return chunk_scores<2, 16>(q + int64_t(i) * hd, hd, krow, n, scale, s + i * ld, ld);
    case 1: return chunk_scores<1, 16>(q + int64_t(i) * hd, hd, krow, n, scale, s + i * ld, ld);
    default: return;
  }
}

// Values: C blocks of 16 columns for Q queries at a time, their Q * C sums held
// in registers across the chunk. Each sum adds the positions in order (a chain
// of dependent FMAs), so enough independent sums must be in flight to hide the
// FMA latency: three queries x one block of columns ran at half the speed of
// three queries x four blocks (hd 64). A head_dim % 16 == 8 ends with 8 columns (masked).
inline __m512 load_v(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
inline __m512 load_v(const uint16_t* p, __mmask16 m) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p)); }

template <int Q, int C, class T>
inline void values_columns(const float* w, int64_t ld, const T* const* vrow, int n, int hd, float* acc, int d,
                           __mmask16 m) {
  __m512 a[Q][C];
  for (int u = 0; u < Q; ++u)
    for (int c = 0; c < C; ++c) a[u][c] = _mm512_maskz_loadu_ps(m, acc + u * hd + d + 16 * c);
  for (int j = 0; j < n; ++j) {
    __m512 v[C];
    for (int c = 0; c < C; ++c) v[c] = load_v(vrow[j] + d + 16 * c, m);
    for (int u = 0; u < Q; ++u) {
      const __m512 wu = _mm512_set1_ps(w[u * ld + j]);
      for (int c = 0; c < C; ++c) a[u][c] = _mm512_fmadd_ps(wu, v[c], a[u][c]);
    }
  }
  for (int u = 0; u < Q; ++u)
    for (int c = 0; c < C; ++c) _mm512_mask_storeu_ps(acc + u * hd + d + 16 * c, m, a[u][c]);
}

// acc[u] += sum_j w[u][j] * v_j: per element, the positions in order, like the scalar kernel.
template <int Q, class T>
void chunk_values(const float* w, int64_t ld, const T* const* vrow, int n, int hd, float* acc) {
  constexpr int C = Q <= 4 ? 4 : 2;  // at most 16 sums
  int d = 0;
  for (; d + 16 * C <= hd; d += 16 * C) values_columns<Q, C>(w, ld, vrow, n, hd, acc, d, 0xffff);
  for (; d + 16 <= hd; d += 16) values_columns<Q, 1>(w, ld, vrow, n, hd, acc, d, 0xffff);
  if (d < hd) values_columns<Q, 1>(w, ld, vrow, n, hd, acc, d, 0x00ff);
}

template <class T>
void chunk_values_all(const float* w, int64_t ld, int nq, const T* const* vrow, int n, int hd, float* acc) {
  int i = 0;
  for (; i + 8 <= nq; i += 8) chunk_values<8>(w + i * ld, ld, vrow, n, hd, acc + int64_t(i) * hd);
  float* a = acc + int64_t(i) * hd;
  w += i * ld;
  switch (nq - i) {
    case 7: return chunk_values<7>(w, ld, vrow, n, hd, a);
    case 6: return chunk_values<6>(w, ld, vrow, n, hd, a);
    case 5: return chunk_values<5>(w, ld, vrow, n, hd, a);
    case 4: return chunk_values<4>(w, ld, vrow, n, hd, a);
    case 3: return chunk_values<3>(w, ld, vrow, n, hd, a);
    case 2: return chunk_values<2>(w, ld, vrow, n, hd, a);
    case 1: return chunk_values<1>(w, ld, vrow, n, hd, a);
    default: return;
  }
}

// An f16 chunk is converted to float once when the queries take more than one pass over it.
constexpr int kScoresConvertAbove = 4, kValuesConvertAbove = 8;

constexpr auto f16_to_float = [](const uint16_t* src, float* dst, int n) {
  int i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
  if (i < n) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
};

void attn_scores(const KvLayerView& kv, const int32_t* block_table, int32_t p0, int32_t p1, const float* q, int nq,
                 int kv_head, float scale, float* s, int64_t ld) {
  if (!kv_fast_path(kv)) return kScalarKernels.attn_scores(kv, block_table, p0, p1, q, nq, kv_head, scale, s, ld);
  walk_kv(kv, kv.k, block_table, p0, p1, kv_head, nq, kScoresConvertAbove, f16_to_float,
          [&](int j0, int n, const auto* rows) { chunk_scores_all(q, nq, kv.head_dim, rows, n, scale, s + j0, ld); });
}

void attn_values(const KvLayerView& kv, const int32_t* block_table, int32_t p0, int32_t p1, const float* w,
                 int64_t ld, int nq, int kv_head, float* acc) {
  if (!kv_fast_path(kv)) return kScalarKernels.attn_values(kv, block_table, p0, p1, w, ld, nq, kv_head, acc);
  walk_kv(kv, kv.v, block_table, p0, p1, kv_head, nq, kValuesConvertAbove, f16_to_float,
          [&](int j0, int n, const auto* rows) { chunk_values_all(w + j0, ld, nq, rows, n, kv.head_dim, acc); });
}

double softmax_exp(float* s, int64_t n) {
  const __m512 ninf = _mm512_set1_ps(-__builtin_inff());
  __m512 mx16 = ninf;
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) mx16 = _mm512_max_ps(mx16, _mm512_loadu_ps(s + j));
  const __mmask16 tail = first_lanes(n - j);
  mx16 = _mm512_max_ps(mx16, _mm512_mask_loadu_ps(ninf, tail, s + j));
  const __m512 mv = _mm512_set1_ps(_mm512_reduce_max_ps(mx16));
  __m512d sum0 = _mm512_setzero_pd(), sum1 = _mm512_setzero_pd();
  for (j = 0; j + 32 <= n; j += 32) {  // two sums, as in rmsnorm_row
    const __m512 e0 = exp512(_mm512_sub_ps(_mm512_loadu_ps(s + j), mv));
    const __m512 e1 = exp512(_mm512_sub_ps(_mm512_loadu_ps(s + j + 16), mv));
    _mm512_storeu_ps(s + j, e0);
    _mm512_storeu_ps(s + j + 16, e1);
    sum0 = add_widened(sum0, e0);
    sum1 = add_widened(sum1, e1);
  }
  for (; j < n; j += 16) {  // lanes past n: loaded as 0, their exp zeroed, not stored
    const __mmask16 m = first_lanes(n - j < 16 ? n - j : 16);
    const __m512 e = _mm512_maskz_mov_ps(m, exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + j), mv)));
    _mm512_mask_storeu_ps(s + j, m, e);
    sum0 = add_widened(sum0, e);
  }
  return _mm512_reduce_add_pd(_mm512_add_pd(sum0, sum1));
}

template <bool kToF16>
inline __m512 scaled_prob(__m512 p, __m512 inv) {
  p = _mm512_mul_ps(p, inv);
  if constexpr (kToF16) p = _mm512_cvtph_ps(_mm512_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT));
  return p;
}

template <bool kToF16>
void scale_probs_t(float* s, int64_t n, float inv) {
  const __m512 iv = _mm512_set1_ps(inv);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) _mm512_storeu_ps(s + j, scaled_prob<kToF16>(_mm512_loadu_ps(s + j), iv));
  if (j < n) {
    const __mmask16 m = first_lanes(n - j);
    _mm512_mask_storeu_ps(s + j, m, scaled_prob<kToF16>(_mm512_maskz_loadu_ps(m, s + j), iv));
  }
}

void scale_probs(float* s, int64_t n, float inv, bool to_f16) {
  if (to_f16)
    scale_probs_t<true>(s, n, inv);
  else
    scale_probs_t<false>(s, n, inv);
}

}  // namespace

// The ops left null are kAvx2Kernels' (avx512_kernels() fills them in):
// - quantize_act: an AVX-512 version (a block as two registers, the same bits)
//   measured no faster: 13.5 vs 12.9 ns per block for Q4_1, 7.3 vs 8.2 for Q8_0
//   (bench_kernels --cpu-time, 2026-12-03), and it is under 1% of a decode step.
const KernelTable kAvx512Kernels{
    .isa = "avx512",
    .quantize_act = nullptr,
    .matmul_quant = matmul_quant,
    .matmul_float_scratch = matmul_float_scratch,
    .matmul_float = matmul_float,
    .matmul_scaled = matmul_scaled,
    .rmsnorm_row = rmsnorm_row,
    .silu_mul = silu_mul,
    .add = add,
    .attn_scores = attn_scores,
    .softmax_exp = softmax_exp,
    .scale_probs = scale_probs,
    .attn_values = attn_values,
    .gelu_mul = gelu_mul,
};

}  // namespace inferd::kernels::cpu
