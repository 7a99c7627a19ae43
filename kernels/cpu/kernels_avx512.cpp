// AVX-512 (F, BW, VL) + VNNI kernels: the quantized matmul (Q4_0, Q4_1, Q8_0).
// This file alone is compiled with those instruction sets, and without FMA
// contraction, and runs only after the backend has checked the CPU. As in
// kernels_avx2.cpp, everything here has internal linkage and uses no
// standard-library templates.
//
// Layout: sixteen weight rows share a register, one row per 32-bit lane. A
// block's weights are repacked so that register j holds elements 4j..4j+3 of
// all sixteen rows; eight vpdpbusd with a token's four matching activation bytes
// broadcast leave row r's exact int32 dot in lane r. Each (row, token) then
// takes the scalar kernel's steps in its order (one product for the scale, one
// for the dot, one add per block, the correction summed apart), so the results
// are those of kScalarKernels bit for bit, for any number of tokens.
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12 warns inside its own AVX-512 headers (their _mm512_undefined_* values).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#include <stdlib.h>

#include "kernels/cpu/kernel_table.hpp"
#include "kernels/quant_blocks.hpp"

namespace inferd::kernels::cpu {
namespace {

constexpr int kRows = 16;   // weight rows per register
constexpr int kTokens = 8;  // tokens per pass over a packed row group (two activation tiles)

// One block of sixteen rows, repacked.
struct alignas(64) Packed {
  __m512i q[8];  // q[j] lane r: elements 4j..4j+3 of row r as unsigned bytes
  __m512 d;      // the rows' scales
  __m512 k;      // the rows' factor of the activation correction c (see ActTile)
};

// Per weight type: block layout and how its bytes become unsigned dpbusd operands.
// head: each row's first four block bytes; d: the rows' scales.
struct Q4_0A {
  using Block = BlockQ4_0;
  static constexpr bool has_k = true;
  static constexpr bool biased = false;
  static constexpr int qs = 2;  // offset of the quants in the block
  static __m512 k(__m512i, __m512 d) { return d; }
};
struct Q4_1A {
  using Block = BlockQ4_1;
  static constexpr bool has_k = true;
  static constexpr bool biased = false;
  static constexpr int qs = 4;
  static __m512 k(__m512i head, __m512) { return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(head, 16))); }
};
// Q8_0's signed bytes enter vpdpbusd as w + 128; the dot then carries an extra
// 128 * sum(a), subtracted through the accumulator's start value.
struct Q8_0A {
  using Block = BlockQ8_0;
  static constexpr bool has_k = false;
  static constexpr bool biased = true;
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
    __m512i acc = W::biased ? _mm512_set1_epi32(start[(t0 + i) * nb + b]) : _mm512_setzero_si512();
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
  constexpr int64_t share = kRows * static_cast<int64_t>(sizeof(typename W::Block));
  if (next)
    for (int64_t o = b * share; o < (b + 1) * share; o += 64)
      _mm_prefetch(reinterpret_cast<const char*>(next + o), _MM_HINT_T0);
}

// One token (decode): each block is packed in registers and used at once.
template <class W>
void rows_x_token(const uint8_t* rows, const int32_t* off, int64_t nb, const ActTile* xq, const int32_t* start,
                  float* y, __mmask16 mask, const uint8_t* next) {
  const __m512i offs = _mm512_load_si512(off);
  __m512 sum[1] = {_mm512_setzero_ps()}, corr[1] = {_mm512_setzero_ps()};
  for (int64_t b = 0; b < nb; ++b) {
    prefetch_share<W>(next, b);
    Packed p;
    pack_block<W>(rows + b * static_cast<int64_t>(sizeof(typename W::Block)), off, offs, p);
    block_x_tokens<W, 1>(p, xq, nb, b, 0, start, sum, corr);
  }
  _mm512_mask_storeu_ps(y, mask, _mm512_add_ps(sum[0], corr[0]));
}

template <class W>
void rows_x_tokens_n(int n, const Packed* pk, int64_t nb, const ActTile* xq, int64_t t0, const int32_t* start,
                     float* y, int64_t ldy, __mmask16 mask) {
  switch (n) {
    case 1: return rows_x_tokens<W, 1>(pk, nb, xq, t0, start, y, ldy, mask);
    case 2: return rows_x_tokens<W, 2>(pk, nb, xq, t0, start, y, ldy, mask);
    case 3: return rows_x_tokens<W, 3>(pk, nb, xq, t0, start, y, ldy, mask);
    case 4: return rows_x_tokens<W, 4>(pk, nb, xq, t0, start, y, ldy, mask);
    case 5: return rows_x_tokens<W, 5>(pk, nb, xq, t0, start, y, ldy, mask);
    case 6: return rows_x_tokens<W, 6>(pk, nb, xq, t0, start, y, ldy, mask);
    case 7: return rows_x_tokens<W, 7>(pk, nb, xq, t0, start, y, ldy, mask);
    default: return rows_x_tokens<W, kTokens>(pk, nb, xq, t0, start, y, ldy, mask);
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
  auto* mem = static_cast<uint8_t*>(scratch.get(packed_bytes + (W::biased ? n_tokens * nb * 4 : 0)));
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
  const auto* base = static_cast<const uint8_t*>(w.data);
  for (int64_t r = r0; r < r1; r += kRows) {
    // A short last group repeats its last row in the missing lanes and stores only the real ones.
    const int n = r1 - r < kRows ? static_cast<int>(r1 - r) : kRows;
    alignas(64) int32_t off[kRows];
    for (int i = 0; i < kRows; ++i) off[i] = static_cast<int32_t>((i < n ? i : n - 1) * w.row_stride);
    const __mmask16 mask = static_cast<__mmask16>((1u << n) - 1);
    const uint8_t* rows = base + r * w.row_stride;
    const uint8_t* next = r + kRows < r1 ? rows + kRows * w.row_stride : nullptr;
    if (n_tokens == 1) {
      rows_x_token<W>(rows, off, nb, xq, start, y + r, mask, next);
      continue;
    }
    // Several tokens: the group is packed once into scratch (in L1) and read for every token tile.
    const __m512i offs = _mm512_load_si512(off);
    for (int64_t b = 0; b < nb; ++b) {
      prefetch_share<W>(next, b);
      pack_block<W>(rows + b * static_cast<int64_t>(sizeof(typename W::Block)), off, offs, pk[b]);
    }
    for (int64_t t0 = 0; t0 < n_tokens; t0 += kTokens) {
      const int tn = n_tokens - t0 < kTokens ? static_cast<int>(n_tokens - t0) : kTokens;
      rows_x_tokens_n<W>(tn, pk, nb, xq, t0, start, y + r, ldy, mask);
    }
  }
}

}  // namespace

void matmul_quant_avx512(const WeightView& w, const ActTile* xq, int64_t n_tokens, float* y, int64_t ldy,
                         int64_t r0, int64_t r1) {
  switch (w.type) {
    case DType::Q4_0: return quant_matmul_typed<Q4_0A>(w, xq, n_tokens, y, ldy, r0, r1);
    case DType::Q4_1: return quant_matmul_typed<Q4_1A>(w, xq, n_tokens, y, ldy, r0, r1);
    default: return quant_matmul_typed<Q8_0A>(w, xq, n_tokens, y, ldy, r0, r1);
  }
}

}  // namespace inferd::kernels::cpu
