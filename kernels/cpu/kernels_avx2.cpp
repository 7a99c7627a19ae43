// AVX2 + FMA + F16C kernels. This file alone is compiled with those instruction
// sets and runs only after the backend has checked the CPU. Everything here has
// internal linkage and uses no standard-library templates, so no function built
// with AVX2 can be merged into (and run by) the portable code.
#include <immintrin.h>
#include <math.h>

#include "kernels/cpu/kernel_table.hpp"
#include "kernels/cpu/kv_walk.hpp"
#include "kernels/quant_blocks.hpp"

namespace inferd::kernels::cpu {
namespace {

inline float hsum(__m256 v) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}

// Sums of four vectors as one 128-bit vector {sum a, sum b, sum c, sum d}.
inline __m128 hsum4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

inline float half_to_float(uint16_t h) { return _cvtsh_ss(h); }
inline float round_to_half(float f) { return _cvtsh_ss(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT)); }

// exp(x) for x in [-87, 88] (clamped outside): 2^n * e^r with |r| <= ln2/2 and a
// degree-7 Taylor polynomial for e^r; about 1 ulp.
inline __m256 exp256(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);  // ln2 split in two for precision
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i pow2n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(pow2n));
}

// ---- activation quantization ----------------------------------------------

void quantize_act(DType weight, const float* x, int64_t n, ActTile* tiles, int slot) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < n / kQuantBlock; ++b, x += kQuantBlock) {
    __m256 v[4];
    for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(x + 8 * i);
    __m256 mx = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
                              _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    const float d = amax / 127.0f, id = amax != 0 ? 127.0f / amax : 0.0f;
    const __m256 mul = _mm256_set1_ps(id);
    __m256i q[4];
    for (int i = 0; i < 4; ++i)
      q[i] = _mm256_cvtps_epi32(
          _mm256_round_ps(_mm256_mul_ps(v[i], mul), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    ActTile& a = tiles[b];
    a.d[slot] = round_to_half(d);
    a.c[slot] = 0;
    if (weight != DType::Q8_0 && weight != DType::Q6_K) {
      const __m256i s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
      __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
      s4 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 1));
      a.c[slot] = act_correction(weight, d, a.d[slot], _mm_cvtsi128_si32(s4));
      if (act_correction_is_half(weight)) a.c[slot] = round_to_half(a.c[slot]);
    }
    // int32 -> int8 packing works per 128-bit lane; the permute restores the order.
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(a.q[slot]),
                        _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  }
}

// ---- quantized matmul -------------------------------------------------------

inline __m256i unpack_nibbles(const uint8_t* qs) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(0x0f));
}

// Sum of products of 32 unsigned bytes with 32 signed bytes, as 8 int32 lanes.
inline __m256i dot_u8_i8(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

// Per weight type: the block, its registers, and the block's integer dot with an
// activation block. has_k: the block adds k_w * c (see ActTile). load_at and
// scales_at take block b (of 32 elements) of a row; `nibbles`: the two-row
// matvec of the 4-bit legacy types applies.
template <class Self>
struct At {
  static constexpr bool nibbles = false;
  static auto load_at(const uint8_t* row, int64_t b) {
    return Self::load(reinterpret_cast<const typename Self::Block*>(row) + b);
  }
  static __m128 scales_at(const uint8_t* row, int64_t b) {
    return Self::scales(reinterpret_cast<const typename Self::Block*>(row) + b);
  }
};

struct Q4_0W : At<Q4_0W> {
  static constexpr bool nibbles = true;
  using Block = BlockQ4_0;
  static constexpr bool has_k = true;
  struct Reg {
    __m256i q;
    float d, k;
  };
  static Reg load(const Block* b) {
    const float d = half_to_float(b->d);
    return {unpack_nibbles(b->qs), d, d};
  }
  static __m256i dot(const Reg& w, __m256i a) { return dot_u8_i8(w.q, a); }
  // {d, k} as floats: for Q4_0 k is d itself.
  static __m128 scales(const Block* b) { return _mm_cvtph_ps(_mm_set1_epi16(static_cast<short>(b->d))); }
  // {d0, k0, d1, k1} of two blocks.
  static __m128 scales2(const Block* b0, const Block* b1) {
    // Unsigned: a negative scale has its top bit set, and as int the product overflows.
    const int d0 = static_cast<int>(b0->d * 0x10001u), d1 = static_cast<int>(b1->d * 0x10001u);
    return _mm_cvtph_ps(_mm_insert_epi32(_mm_cvtsi32_si128(d0), d1, 1));
  }
};

struct Q4_1W : At<Q4_1W> {
  static constexpr bool nibbles = true;
  using Block = BlockQ4_1;
  static constexpr bool has_k = true;
  struct Reg {
    __m256i q;
    float d, k;
  };
  static Reg load(const Block* b) { return {unpack_nibbles(b->qs), half_to_float(b->d), half_to_float(b->m)}; }
  static __m256i dot(const Reg& w, __m256i a) { return dot_u8_i8(w.q, a); }
  // {d, m}: the block's first four bytes, converted together.
  static __m128 scales(const Block* b) {
    int dm;
    __builtin_memcpy(&dm, b, 4);
    return _mm_cvtph_ps(_mm_cvtsi32_si128(dm));
  }
  static __m128 scales2(const Block* b0, const Block* b1) {
    int dm0, dm1;
    __builtin_memcpy(&dm0, b0, 4);
    __builtin_memcpy(&dm1, b1, 4);
    return _mm_cvtph_ps(_mm_insert_epi32(_mm_cvtsi32_si128(dm0), dm1, 1));
  }
};

struct Q8_0W : At<Q8_0W> {
  using Block = BlockQ8_0;
  static constexpr bool has_k = false;
  struct Reg {
    __m256i q;
    float d, k;
  };
  static Reg load(const Block* b) {
    return {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qs)), half_to_float(b->d), 0.0f};
  }
  // maddubs wants one unsigned operand: |w| times a with w's sign.
  static __m256i dot(const Reg& w, __m256i a) { return dot_u8_i8(_mm256_sign_epi8(w.q, w.q), _mm256_sign_epi8(a, w.q)); }
  static __m128 scales(const Block* b) { return _mm_cvtph_ps(_mm_cvtsi32_si128(b->d)); }
};

// 32 bytes of 0x10 where bit i of the 32 bits at p is set: byte i takes byte
// i / 8 of the word, ORed with all bits but i % 8, and is all ones iff bit i was.
inline __m256i bit4_from_bits(const uint8_t* p) {
  int x;
  __builtin_memcpy(&x, p, 4);
  const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
  const __m256i bytes = _mm256_or_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(x), shuf),
                                        _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
  return _mm256_and_si256(_mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1)), _mm256_set1_epi8(0x10));
}

// Q5_0 / Q5_1: Q4_0 / Q4_1 with bit 4 from qh.
struct Q5_0W : At<Q5_0W> {
  using Block = BlockQ5_0;
  static constexpr bool has_k = true;
  struct Reg {
    __m256i q;
    float d, k;
  };
  static Reg load(const Block* b) {
    const float d = half_to_float(b->d);
    return {_mm256_or_si256(unpack_nibbles(b->qs), bit4_from_bits(b->qh)), d, d};
  }
  static __m256i dot(const Reg& w, __m256i a) { return dot_u8_i8(w.q, a); }
  static __m128 scales(const Block* b) { return _mm_cvtph_ps(_mm_set1_epi16(static_cast<short>(b->d))); }
};

struct Q5_1W : At<Q5_1W> {
  using Block = BlockQ5_1;
  static constexpr bool has_k = true;
  struct Reg {
    __m256i q;
    float d, k;
  };
  static Reg load(const Block* b) {
    return {_mm256_or_si256(unpack_nibbles(b->qs), bit4_from_bits(b->qh)), half_to_float(b->d), half_to_float(b->m)};
  }
  static __m256i dot(const Reg& w, __m256i a) { return dot_u8_i8(w.q, a); }
  static __m128 scales(const Block* b) {
    int dm;
    __builtin_memcpy(&dm, b, 4);
    return _mm_cvtph_ps(_mm_cvtsi32_si128(dm));
  }
};

// Q4_K / Q5_K: block b is sub-block b % 8 of super-block b / 8, with scale
// d * sc and correction factor dmin * m.
template <bool kFive>
struct QKW {
  static constexpr bool nibbles = false, has_k = true;
  static constexpr int kBlock = kFive ? 176 : 144, kQs = kFive ? 48 : 16;
  struct Reg {
    __m256i q;
    float d, k;
  };
  static __m128 scales_at(const uint8_t* row, int64_t b) {
    const auto* h = reinterpret_cast<const BlockQ4_K*>(row + (b / 8) * kBlock);
    int sc, m;
    k_scale_min(h->scales, static_cast<int>(b % 8), sc, m);
    return _mm_setr_ps(half_to_float(h->d) * static_cast<float>(sc), half_to_float(h->dmin) * static_cast<float>(m),
                       0, 0);
  }
  static Reg load_at(const uint8_t* row, int64_t b) {
    const uint8_t* blk = row + (b / 8) * kBlock;
    const int j = static_cast<int>(b % 8);
    const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kQs + 32 * (j / 2)));
    __m256i q = _mm256_and_si256(j % 2 ? _mm256_srli_epi16(raw, 4) : raw, _mm256_set1_epi8(0x0f));
    if constexpr (kFive) {
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16));
      q = _mm256_or_si256(q, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, j), _mm256_set1_epi8(1)), 4));
    }
    const __m128 dk = scales_at(row, b);
    return {q, _mm_cvtss_f32(dk), _mm_cvtss_f32(_mm_movehdup_ps(dk))};
  }
  static __m256i dot(const Reg& w, __m256i a) { return dot_u8_i8(w.q, a); }
};
using Q4_KW = QKW<false>;
using Q5_KW = QKW<true>;

// Q6_K: block b = 4n + k of super-block b / 8; its values q - 32 as signed bytes,
// and its two scales of 16 applied in the integer dot (pairs summed by
// maddubs, then weighted by madd), so the block's scale is d alone.
struct Q6_KW {
  static constexpr bool nibbles = false, has_k = false;
  struct Reg {
    __m256i q, sc;
    float d, k;
  };
  static __m128 scales_at(const uint8_t* row, int64_t b) {
    return _mm_setr_ps(half_to_float(reinterpret_cast<const BlockQ6_K*>(row + (b / 8) * 210)->d), 0, 0, 0);
  }
  static Reg load_at(const uint8_t* row, int64_t b) {
    const auto* blk = reinterpret_cast<const BlockQ6_K*>(row + (b / 8) * 210);
    const int j = static_cast<int>(b % 8), n = j / 4, k = j % 4;
    const __m256i ql = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->ql + 64 * n + 32 * (k % 2)));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->qh + 32 * n));
    const __m256i lo = _mm256_and_si256(k < 2 ? ql : _mm256_srli_epi16(ql, 4), _mm256_set1_epi8(0x0f));
    const __m256i hi = _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(qh, 2 * k), 4), _mm256_set1_epi8(0x30));
    const __m256i q = _mm256_sub_epi8(_mm256_or_si256(lo, hi), _mm256_set1_epi8(32));
    const __m256i sc = _mm256_set_m128i(_mm_set1_epi16(blk->scales[2 * j + 1]), _mm_set1_epi16(blk->scales[2 * j]));
    return {q, sc, half_to_float(blk->d), 0.0f};
  }
  static __m256i dot(const Reg& w, __m256i a) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(w.q, w.q), _mm256_sign_epi8(a, w.q)), w.sc);
  }
};

// R weight rows x T tokens: each weight block is loaded once for T tokens and
// each activation block once for R rows. Per (row, token) and block the work is
// the integer dot, its conversion and one FMA; the scale products d_w * d_a and
// the correction k_w * c are 4-token vectors computed once per row and block.
template <class W, int R, int T>
void quant_tile(const uint8_t* rows, size_t stride, const ActTile* x, int64_t nb, float* y, int64_t ldy) {
  __m256 acc[R][T];
  __m128 corr[R];
  for (int r = 0; r < R; ++r) {
    corr[r] = _mm_setzero_ps();
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const ActTile& a = x[b];
    const __m128 ad = _mm_loadu_ps(a.d);
    typename W::Reg w[R];
    alignas(16) float scale[R][4];
    for (int r = 0; r < R; ++r) {
      w[r] = W::load_at(rows + r * stride, b);
      _mm_store_ps(scale[r], _mm_mul_ps(_mm_set1_ps(w[r].d), ad));
      if constexpr (W::has_k) corr[r] = _mm_fmadd_ps(_mm_set1_ps(w[r].k), _mm_loadu_ps(a.c), corr[r]);
    }
    for (int t = 0; t < T; ++t) {
      const __m256i aq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q[t]));
      for (int r = 0; r < R; ++r)
        acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(W::dot(w[r], aq)), _mm256_broadcast_ss(&scale[r][t]),
                                    acc[r][t]);
    }
  }
  for (int r = 0; r < R; ++r) {
    alignas(16) float c[4];
    _mm_store_ps(c, corr[r]);
    for (int t = 0; t < T; ++t) y[t * ldy + r] = hsum(acc[r][t]) + c[t];
  }
}

// One token (decode), R rows: the matvec is bound by reading the weights, so the
// per-block work is cut to the bone: the weight block's {d, k} are converted in
// one instruction and multiplied by the activation block's {d, c} at once; lane 0
// is the block's scale, lane 1 (summed apart) its correction.
template <class W, int R>
void matvec_tile(const uint8_t* rows, size_t stride, const ActTile* x, int64_t nb, float* y) {
  __m256 acc[R];
  __m128 corr[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps(), corr[r] = _mm_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const ActTile& a = x[b];
    const __m256i aq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q[0]));
    const __m128 adc = _mm_unpacklo_ps(_mm_load_ss(&a.d[0]), _mm_load_ss(&a.c[0]));
    for (int r = 0; r < R; ++r) {
      const uint8_t* row = rows + r * stride;
      const __m128 sc = _mm_mul_ps(W::scales_at(row, b), adc);
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(W::dot(W::load_at(row, b), aq)), _mm256_broadcastss_ps(sc), acc[r]);
      if constexpr (W::has_k) corr[r] = _mm_add_ps(corr[r], sc);
    }
  }
  for (int r = 0; r < R; ++r) {
    float s = hsum(acc[r]);
    if constexpr (W::has_k) s += _mm_cvtss_f32(_mm_movehdup_ps(corr[r]));
    y[r] = s;
  }
}

// One token against two rows of 4-bit weights at a time: both rows' 16 bytes
// share one register, so unpacking costs half as much per row. Low and high
// nibbles keep separate float accumulators, so every lane sums exactly what
// matvec_tile's lanes do (and the reference's): the same result, bit for bit.
template <class W, int P>
void matvec_nibbles_tile(const uint8_t* rows, size_t stride, const ActTile* x, int64_t nb, float* y) {
  __m256 acc_lo[P], acc_hi[P];
  __m128 corr[P];
  for (int p = 0; p < P; ++p) acc_lo[p] = acc_hi[p] = _mm256_setzero_ps(), corr[p] = _mm_setzero_ps();
  const __m256i low4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
  const __m256i spread = _mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2);  // row 0's scale to lanes 0-3, row 1's to 4-7
  for (int64_t b = 0; b < nb; ++b) {
    const ActTile& a = x[b];
    const __m256i a_lo = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a.q[0])));
    const __m256i a_hi = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a.q[0] + 16)));
    const __m128 adc = _mm_unpacklo_ps(_mm_load_ss(&a.d[0]), _mm_load_ss(&a.c[0]));
    const __m128 adc2 = _mm_movelh_ps(adc, adc);
    for (int p = 0; p < P; ++p) {
      const auto* b0 = reinterpret_cast<const typename W::Block*>(rows + 2 * p * stride) + b;
      const auto* b1 = reinterpret_cast<const typename W::Block*>(rows + (2 * p + 1) * stride) + b;
      const __m256i q = _mm256_inserti128_si256(
          _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b0->qs))),
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(b1->qs)), 1);
      const __m256i lo = _mm256_and_si256(q, low4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
      const __m128 sc = _mm_mul_ps(W::scales2(b0, b1), adc2);  // {d0 da, k0 c, d1 da, k1 c}
      const __m256 scale = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(sc), spread);
      const __m256i dlo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, a_lo), ones);
      const __m256i dhi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, a_hi), ones);
      acc_lo[p] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dlo), scale, acc_lo[p]);
      acc_hi[p] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dhi), scale, acc_hi[p]);
      corr[p] = _mm_add_ps(corr[p], sc);
    }
  }
  for (int p = 0; p < P; ++p) {
    // Row r's 8 lanes are its halves of acc_lo and acc_hi, summed like hsum().
    alignas(16) float c[4];
    _mm_store_ps(c, corr[p]);
    for (int r = 0; r < 2; ++r) {
      const __m128 lo = r ? _mm256_extractf128_ps(acc_lo[p], 1) : _mm256_castps256_ps128(acc_lo[p]);
      const __m128 hi = r ? _mm256_extractf128_ps(acc_hi[p], 1) : _mm256_castps256_ps128(acc_hi[p]);
      __m128 v = _mm_add_ps(lo, hi);
      v = _mm_add_ps(v, _mm_movehl_ps(v, v));
      v = _mm_add_ss(v, _mm_movehdup_ps(v));
      y[2 * p + r] = _mm_cvtss_f32(v) + c[2 * r + 1];
    }
  }
}

constexpr int kTileRows = 2;    // weight rows per tile in batched matmuls
constexpr int kMatvecRows = 2;         // weight rows per tile for a single token (Q8_0)
constexpr int kMatvecRowsNibbles = 4;  // the same for the 4-bit types: two row pairs
// A matvec streams the weights once; asking for the tile after next this far
// ahead of use (measured: +30% over the hardware prefetcher alone) hides the
// memory latency.
constexpr size_t kPrefetchBytes = 1024;
// Batched matmuls walk the rows in blocks of about this many weight bytes, which
// stay in L1 while every token tile passes over them.
constexpr size_t kRowBlockBytes = 24 * 1024;

inline int64_t rows_per_block(size_t row_bytes, int64_t multiple) {
  const int64_t n = static_cast<int64_t>(kRowBlockBytes / row_bytes) / multiple * multiple;
  return n > multiple ? n : multiple;
}

template <class W, int R>
void quant_tile_t(int tn, const uint8_t* rows, size_t stride, const ActTile* x, int64_t nb, float* y,
                  int64_t ldy) {
  switch (tn) {
    case 1: return quant_tile<W, R, 1>(rows, stride, x, nb, y, ldy);
    case 2: return quant_tile<W, R, 2>(rows, stride, x, nb, y, ldy);
    case 3: return quant_tile<W, R, 3>(rows, stride, x, nb, y, ldy);
    default: return quant_tile<W, R, 4>(rows, stride, x, nb, y, ldy);
  }
}

template <class W>
void quant_matmul_typed(const WeightView& w, const ActTile* xq, int64_t n_tokens, float* y, int64_t ldy,
                        int64_t r0, int64_t r1) {
  const int64_t nb = w.cols / kQuantBlock;
  const auto* base = static_cast<const uint8_t*>(w.data);
  if (n_tokens == 1) {
    constexpr int rows = W::nibbles ? kMatvecRowsNibbles : kMatvecRows;
    const size_t tile_bytes = rows * w.row_stride;
    int64_t r = r0;
    for (; r + rows <= r1; r += rows) {
      const uint8_t* tile = base + r * w.row_stride;
      for (size_t off = 0; off < tile_bytes; off += 64)
        _mm_prefetch(reinterpret_cast<const char*>(tile + tile_bytes + kPrefetchBytes + off), _MM_HINT_T0);
      if constexpr (W::nibbles)  // the 4-bit legacy types
        matvec_nibbles_tile<W, rows / 2>(tile, w.row_stride, xq, nb, y + r);
      else
        matvec_tile<W, rows>(tile, w.row_stride, xq, nb, y + r);
    }
    for (; r < r1; ++r) matvec_tile<W, 1>(base + r * w.row_stride, w.row_stride, xq, nb, y + r);
    return;
  }
  const int64_t block = rows_per_block(w.row_stride, kTileRows);
  for (int64_t b0 = r0; b0 < r1; b0 += block) {
    const int64_t b1 = b0 + block < r1 ? b0 + block : r1;
    for (int64_t t0 = 0; t0 < n_tokens; t0 += kActTileTokens) {
      const int tn = static_cast<int>(n_tokens - t0 < kActTileTokens ? n_tokens - t0 : kActTileTokens);
      const ActTile* x = xq + (t0 / kActTileTokens) * nb;
      float* yt = y + t0 * ldy;
      int64_t r = b0;
      for (; r + kTileRows <= b1; r += kTileRows)
        quant_tile_t<W, kTileRows>(tn, base + r * w.row_stride, w.row_stride, x, nb, yt + r, ldy);
      for (; r < b1; ++r) quant_tile_t<W, 1>(tn, base + r * w.row_stride, w.row_stride, x, nb, yt + r, ldy);
    }
  }
}

void matmul_quant(const WeightView& w, const ActTile* xq, int64_t n_tokens, float* y, int64_t ldy, int64_t r0,
                  int64_t r1) {
  switch (w.type) {
    case DType::Q4_0: return quant_matmul_typed<Q4_0W>(w, xq, n_tokens, y, ldy, r0, r1);
    case DType::Q4_1: return quant_matmul_typed<Q4_1W>(w, xq, n_tokens, y, ldy, r0, r1);
    case DType::Q8_0: return quant_matmul_typed<Q8_0W>(w, xq, n_tokens, y, ldy, r0, r1);
    case DType::Q5_0: return quant_matmul_typed<Q5_0W>(w, xq, n_tokens, y, ldy, r0, r1);
    case DType::Q5_1: return quant_matmul_typed<Q5_1W>(w, xq, n_tokens, y, ldy, r0, r1);
    case DType::Q4_K: return quant_matmul_typed<Q4_KW>(w, xq, n_tokens, y, ldy, r0, r1);
    case DType::Q5_K: return quant_matmul_typed<Q5_KW>(w, xq, n_tokens, y, ldy, r0, r1);
    case DType::Q6_K: return quant_matmul_typed<Q6_KW>(w, xq, n_tokens, y, ldy, r0, r1);
    default: return kScalarKernels.matmul_quant(w, xq, n_tokens, y, ldy, r0, r1);
  }
}

// ---- float-weight matmul ----------------------------------------------------

struct F32L {
  static __m256 load8(const uint8_t* row, int64_t c) { return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + c); }
  static float load1(const uint8_t* row, int64_t c) { return reinterpret_cast<const float*>(row)[c]; }
};
struct F16L {
  static __m256 load8(const uint8_t* row, int64_t c) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const uint16_t*>(row) + c)));
  }
  static float load1(const uint8_t* row, int64_t c) { return half_to_float(reinterpret_cast<const uint16_t*>(row)[c]); }
};
struct BF16L {
  static __m256 load8(const uint8_t* row, int64_t c) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const uint16_t*>(row) + c));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static float load1(const uint8_t* row, int64_t c) {
    const uint32_t bits = static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(row)[c]) << 16;
    float f;
    __builtin_memcpy(&f, &bits, 4);
    return f;
  }
};

template <class L, int R, int T>
void float_tile(const uint8_t* rows, size_t stride, const float* x, int64_t cols, float* y, int64_t ldy) {
  __m256 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c + 8 <= cols; c += 8) {
    __m256 w[R];
    for (int r = 0; r < R; ++r) w[r] = L::load8(rows + r * stride, c);
    for (int t = 0; t < T; ++t) {
      const __m256 xv = _mm256_loadu_ps(x + t * cols + c);
      for (int r = 0; r < R; ++r) acc[r][t] = _mm256_fmadd_ps(w[r], xv, acc[r][t]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) {
      float s = hsum(acc[r][t]);
      for (int64_t k = c; k < cols; ++k) s += L::load1(rows + r * stride, k) * x[t * cols + k];
      y[t * ldy + r] = s;
    }
}

template <class L>
void float_matmul_typed(const WeightView& w, const float* x, int64_t n_tokens, float* y, int64_t ldy, int64_t r0,
                        int64_t r1) {
  const auto* base = static_cast<const uint8_t*>(w.data);
  const int64_t block = rows_per_block(w.row_stride, 1);
  for (int64_t b0 = r0; b0 < r1; b0 += block) {
    const int64_t b1 = b0 + block < r1 ? b0 + block : r1;
    for (int64_t t0 = 0; t0 < n_tokens; t0 += kActTileTokens) {
      const int64_t tn = n_tokens - t0 < kActTileTokens ? n_tokens - t0 : kActTileTokens;
      const float* xt = x + t0 * w.cols;
      float* yt = y + t0 * ldy;
      for (int64_t r = b0; r < b1; ++r) {
        const uint8_t* row = base + r * w.row_stride;
        switch (tn) {
          case 1: float_tile<L, 1, 1>(row, w.row_stride, xt, w.cols, yt + r, ldy); break;
          case 2: float_tile<L, 1, 2>(row, w.row_stride, xt, w.cols, yt + r, ldy); break;
          case 3: float_tile<L, 1, 3>(row, w.row_stride, xt, w.cols, yt + r, ldy); break;
          default: float_tile<L, 1, 4>(row, w.row_stride, xt, w.cols, yt + r, ldy); break;
        }
      }
    }
  }
}

void matmul_float(const WeightView& w, const float* x, int64_t n_tokens, float* y, int64_t ldy, int64_t r0,
                  int64_t r1, float*) {
  switch (w.type) {
    case DType::F16: return float_matmul_typed<F16L>(w, x, n_tokens, y, ldy, r0, r1);
    case DType::BF16: return float_matmul_typed<BF16L>(w, x, n_tokens, y, ldy, r0, r1);
    default: return float_matmul_typed<F32L>(w, x, n_tokens, y, ldy, r0, r1);
  }
}

// ---- scaled-weight matmul (FP8 block-scaled, MXFP4) ----------------------------

inline float float_from_bits(uint32_t bits) {
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}

// 16 e4m3fn bytes as floats / 256: the byte's bits moved into a half's place
// (sign to bit 15, exponent and mantissa to bits 13..7) make a half worth exactly
// 2^-8 of it, subnormals included; 0x7f / 0xff (NaN) are patched in.
inline void e4m3x16(const uint8_t* p, __m256& lo, __m256& hi) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m256i w = _mm256_cvtepu8_epi16(b);
  const __m256i h = _mm256_or_si256(_mm256_and_si256(_mm256_slli_epi16(w, 8), _mm256_set1_epi16(-0x8000)),
                                    _mm256_and_si256(_mm256_slli_epi16(w, 7), _mm256_set1_epi16(0x3f80)));
  lo = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
  hi = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
  const __m128i nan = _mm_cmpeq_epi8(_mm_and_si128(b, _mm_set1_epi8(0x7f)), _mm_set1_epi8(0x7f));
  if (__builtin_expect(_mm_movemask_epi8(nan) != 0, 0)) {
    const __m256 qnan = _mm256_set1_ps(__builtin_nanf(""));
    lo = _mm256_blendv_ps(lo, qnan, _mm256_castsi256_ps(_mm256_cvtepi8_epi32(nan)));
    hi = _mm256_blendv_ps(hi, qnan, _mm256_castsi256_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(nan, 8))));
  }
}

// 8 signed bytes (the low 8 of v) as floats.
inline __m256 i8x8_to_float(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)); }

// One row against T tokens: per block the decoded weights' products with each
// token summed apart, then scaled into the token's accumulator.
template <int T>
void fp8_row(const ScaledWeightView& w, int64_t r, const float* x, float* y, int64_t ldy) {
  const auto* q = static_cast<const uint8_t*>(w.data) + r * w.cols;
  __m256 acc[T];
  float tail[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps(), tail[t] = 0;
  for (int64_t c0 = 0; c0 < w.cols; c0 += kFp8BlockSize) {
    const int64_t c1 = c0 + kFp8BlockSize < w.cols ? c0 + kFp8BlockSize : w.cols;
    const float scale = scale_at(w, r, c0);
    __m256 part[T];
    for (int t = 0; t < T; ++t) part[t] = _mm256_setzero_ps();
    int64_t c = c0;
    for (; c + 16 <= c1; c += 16) {
      __m256 lo, hi;
      e4m3x16(q + c, lo, hi);
      for (int t = 0; t < T; ++t) {
        part[t] = _mm256_fmadd_ps(lo, _mm256_loadu_ps(x + t * w.cols + c), part[t]);
        part[t] = _mm256_fmadd_ps(hi, _mm256_loadu_ps(x + t * w.cols + c + 8), part[t]);
      }
    }
    const __m256 sv = _mm256_set1_ps(scale), undo = _mm256_set1_ps(256.0f);
    for (int t = 0; t < T; ++t) {
      acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(part[t], undo), sv, acc[t]);
      float rest = 0;
      for (int64_t k = c; k < c1; ++k) rest += e4m3fn_to_float(q[k]) * x[t * w.cols + k];
      tail[t] += rest * scale;
    }
  }
  for (int t = 0; t < T; ++t) y[t * ldy] = hsum(acc[t]) + tail[t];
}

// MXFP4: a block's 16 bytes give 16 low and 16 high codes, each looked up as
// 2 * E2M1 in a 16-entry byte table (exact integers), against x in nibble order.
template <int T>
void mxfp4_row(const ScaledWeightView& w, int64_t r, const float* x, float* y, int64_t ldy) {
  const int64_t nb = w.cols / kMxfp4BlockSize;
  const auto* q = static_cast<const uint8_t*>(w.data) + r * (w.cols / 2);
  const auto* s = static_cast<const uint8_t*>(w.scales) + r * nb;
  const __m128i lut = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
  const __m128i low4 = _mm_set1_epi8(0x0f);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16 * b));
    const __m128i lo = _mm_shuffle_epi8(lut, _mm_and_si128(bytes, low4));
    const __m128i hi = _mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(bytes, 4), low4));
    const __m256 w0 = i8x8_to_float(lo), w1 = i8x8_to_float(_mm_srli_si128(lo, 8));
    const __m256 w2 = i8x8_to_float(hi), w3 = i8x8_to_float(_mm_srli_si128(hi, 8));
    const __m256 sv = _mm256_set1_ps(0.5f * float_from_bits(e8m0_float_bits(s[b])));
    for (int t = 0; t < T; ++t) {
      const float* xb = x + t * w.cols + b * kMxfp4BlockSize;
      __m256 part = _mm256_mul_ps(w0, _mm256_loadu_ps(xb));
      part = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xb + 8), part);
      part = _mm256_fmadd_ps(w2, _mm256_loadu_ps(xb + 16), part);
      part = _mm256_fmadd_ps(w3, _mm256_loadu_ps(xb + 24), part);
      acc[t] = _mm256_fmadd_ps(part, sv, acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) y[t * ldy] = hsum(acc[t]);
}

void matmul_scaled(const ScaledWeightView& w, const float* x, int64_t n_tokens, float* y, int64_t ldy, int64_t r0,
                   int64_t r1) {
  static constexpr ScaledRowKernels k{{fp8_row<1>, fp8_row<2>, fp8_row<3>, fp8_row<4>},
                                      {mxfp4_row<1>, mxfp4_row<2>, mxfp4_row<3>, mxfp4_row<4>}};
  scaled_token_tiles(k, w, x, n_tokens, y, ldy, r0, r1);
}

// ---- elementwise ------------------------------------------------------------

void rmsnorm_row(const float* x, const float* weight, float* y, int64_t n, float eps) {
  // Squares in float, summed in double, like the reference.
  __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 sq = _mm256_mul_ps(v, v);
    s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(sq)));
    s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(sq, 1)));
  }
  const __m256d s = _mm256_add_pd(s0, s1);
  __m128d s2 = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
  double sum = _mm_cvtsd_f64(_mm_add_sd(s2, _mm_unpackhi_pd(s2, s2)));
  for (; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / sqrtf(mean + eps);
  const __m256 sc = _mm256_set1_ps(scale);
  for (i = 0; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), sc), _mm256_loadu_ps(weight + i)));
  for (; i < n; ++i) y[i] = (x[i] * scale) * weight[i];
}

// out = op(gate, up) 8 lanes at a time.
template <class Op>
void gated8(const float* gate, const float* up, float* out, int64_t n, Op op) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, op(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
  if (i < n) {  // the tail through the same vector code, via a padded copy
    float g[8] = {}, u[8] = {}, o[8];
    for (int64_t k = i; k < n; ++k) g[k - i] = gate[k], u[k - i] = up[k];
    _mm256_storeu_ps(o, op(_mm256_loadu_ps(g), _mm256_loadu_ps(u)));
    for (int64_t k = i; k < n; ++k) out[k] = o[k - i];
  }
}

// g / (1 + exp(-g)) * u, the scalar kernel's steps.
inline __m256 silu_mul8(__m256 g, __m256 u) {
  const __m256 silu = _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), exp256(_mm256_xor_ps(g, _mm256_set1_ps(-0.0f)))));
  return _mm256_mul_ps(silu, u);
}

void silu_mul(const float* gate, const float* up, float* out, int64_t n) { gated8(gate, up, out, n, silu_mul8); }

// g / (1 + exp(-k (g + 0.044715 g^3))) * u, the scalar kernel's steps.
inline __m256 gelu_mul8(__m256 g, __m256 u) {
  const __m256 g3 = _mm256_mul_ps(_mm256_mul_ps(g, g), g);
  const __m256 inner = _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), g3, g);
  const __m256 e = exp256(_mm256_mul_ps(_mm256_set1_ps(-2.0f * 0.7978845608f), inner));
  return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

void gelu_mul(const float* gate, const float* up, float* out, int64_t n) { gated8(gate, up, out, n, gelu_mul8); }

void add(float* y, const float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(x + i)));
  for (; i < n; ++i) y[i] += x[i];
}

// ---- attention ----------------------------------------------------------------

inline __m256 load_kv(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load_kv(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

// f16 rows converted once for several passes (see for_each_kv_chunk); a lambda
// rather than a function pointer so that it inlines.
constexpr auto f16_to_float = [](const uint16_t* src, float* dst, int n) {
  for (int i = 0; i < n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
};

// Scores of Q queries against the n rows of a chunk, in tiles of Q queries x P
// positions so each q and k load feeds several FMAs, with one reduction per four
// scores. Rows past n repeat a valid row; their scores are not stored.
template <int Q, int P, class T>
void chunk_scores(const float* q, int hd, const T* const* krow, int n, float scale, float* s, int64_t ld) {
  static_assert(Q * P % 4 == 0, "scores are reduced four at a time");
  for (int j = 0; j < n; j += P) {
    const T* k[P];
    for (int u = 0; u < P; ++u) k[u] = krow[j + u < n ? j + u : n - 1];
    __m256 acc[Q * P];
    for (int x = 0; x < Q * P; ++x) acc[x] = _mm256_setzero_ps();
    for (int d = 0; d < hd; d += 8) {
      __m256 kv[P];
      for (int u = 0; u < P; ++u) kv[u] = load_kv(k[u] + d);
      for (int a = 0; a < Q; ++a) {
        const __m256 qv = _mm256_loadu_ps(q + a * hd + d);
        for (int u = 0; u < P; ++u) acc[a * P + u] = _mm256_fmadd_ps(qv, kv[u], acc[a * P + u]);
      }
    }
    for (int x = 0; x < Q * P; x += 4) {
      alignas(16) float r[4];
      _mm_store_ps(r, _mm_mul_ps(hsum4(acc[x], acc[x + 1], acc[x + 2], acc[x + 3]), _mm_set1_ps(scale)));
      for (int y = 0; y < 4; ++y)
        if (j + (x + y) % P < n) s[((x + y) / P) * ld + j + (x + y) % P] = r[y];
    }
  }
}

template <class T>
void chunk_scores_all(const float* q, int nq, int hd, const T* const* krow, int n, float scale, float* s,
                      int64_t ld) {
  switch (nq) {  // one pass for decode-sized groups
    case 4: return chunk_scores<4, 2>(q, hd, krow, n, scale, s, ld);
    case 3: return chunk_scores<3, 4>(q, hd, krow, n, scale, s, ld);
    default: break;
  }
  int i = 0;
  for (; i + 2 <= nq; i += 2) chunk_scores<2, 4>(q + int64_t(i) * hd, hd, krow, n, scale, s + i * ld, ld);
  if (i < nq) chunk_scores<1, 4>(q + int64_t(i) * hd, hd, krow, n, scale, s + i * ld, ld);
}

// acc[u] += sum_j w[u][j] * v_j for Q queries, one 8-wide column at a time so
// the Q partial sums stay in registers across the chunk.
template <int Q, class T>
void chunk_values(const float* w, int64_t ld, const T* const* vrow, int n, int hd, float* acc) {
  for (int d = 0; d < hd; d += 8) {
    __m256 a[Q];
    for (int u = 0; u < Q; ++u) a[u] = _mm256_loadu_ps(acc + u * hd + d);
    for (int j = 0; j < n; ++j) {
      const __m256 v = load_kv(vrow[j] + d);
      for (int u = 0; u < Q; ++u) a[u] = _mm256_fmadd_ps(_mm256_broadcast_ss(w + u * ld + j), v, a[u]);
    }
    for (int u = 0; u < Q; ++u) _mm256_storeu_ps(acc + u * hd + d, a[u]);
  }
}

template <class T>
void chunk_values_all(const float* w, int64_t ld, int nq, const T* const* vrow, int n, int hd, float* acc) {
  int i = 0;
  for (; i + 4 <= nq; i += 4) chunk_values<4>(w + i * ld, ld, vrow, n, hd, acc + int64_t(i) * hd);
  switch (nq - i) {
    case 3: return chunk_values<3>(w + i * ld, ld, vrow, n, hd, acc + int64_t(i) * hd);
    case 2: return chunk_values<2>(w + i * ld, ld, vrow, n, hd, acc + int64_t(i) * hd);
    case 1: return chunk_values<1>(w + i * ld, ld, vrow, n, hd, acc + int64_t(i) * hd);
    default: return;
  }
}

// Each K or V row is read by every query of the group; more than four queries
// take several passes over a chunk, so an f16 chunk is converted to float once.
constexpr int kConvertAbove = 4;

void attn_scores(const KvLayerView& kv, const int32_t* block_table, int32_t p0, int32_t p1, const float* q, int nq,
                 int kv_head, float scale, float* s, int64_t ld) {
  if (!kv_fast_path(kv)) return kScalarKernels.attn_scores(kv, block_table, p0, p1, q, nq, kv_head, scale, s, ld);
  walk_kv(kv, kv.k, block_table, p0, p1, kv_head, nq, kConvertAbove, f16_to_float,
          [&](int j0, int n, const auto* rows) { chunk_scores_all(q, nq, kv.head_dim, rows, n, scale, s + j0, ld); });
}

void attn_values(const KvLayerView& kv, const int32_t* block_table, int32_t p0, int32_t p1, const float* w,
                 int64_t ld, int nq, int kv_head, float* acc) {
  if (!kv_fast_path(kv)) return kScalarKernels.attn_values(kv, block_table, p0, p1, w, ld, nq, kv_head, acc);
  walk_kv(kv, kv.v, block_table, p0, p1, kv_head, nq, kConvertAbove, f16_to_float,
          [&](int j0, int n, const auto* rows) { chunk_values_all(w + j0, ld, nq, rows, n, kv.head_dim, acc); });
}

double softmax_exp(float* s, int64_t n) {
  __m256 mx8 = _mm256_set1_ps(-__builtin_inff());
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) mx8 = _mm256_max_ps(mx8, _mm256_loadu_ps(s + j));
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx8), _mm256_extractf128_ps(mx8, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  float mx = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
  for (int64_t k = j; k < n; ++k) mx = s[k] > mx ? s[k] : mx;
  const __m256 mv = _mm256_set1_ps(mx);
  __m256d sum0 = _mm256_setzero_pd(), sum1 = _mm256_setzero_pd();
  for (j = 0; j + 8 <= n; j += 8) {
    const __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(s + j), mv));
    _mm256_storeu_ps(s + j, e);
    sum0 = _mm256_add_pd(sum0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    sum1 = _mm256_add_pd(sum1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
  }
  const __m256d sd = _mm256_add_pd(sum0, sum1);
  const __m128d s2 = _mm_add_pd(_mm256_castpd256_pd128(sd), _mm256_extractf128_pd(sd, 1));
  double sum = _mm_cvtsd_f64(_mm_add_sd(s2, _mm_unpackhi_pd(s2, s2)));
  if (j < n) {  // the tail through the same vector code, padded with -inf
    alignas(32) float t[8];
    for (int k = 0; k < 8; ++k) t[k] = j + k < n ? s[j + k] : -__builtin_inff();
    _mm256_store_ps(t, exp256(_mm256_sub_ps(_mm256_load_ps(t), mv)));
    for (int64_t k = j; k < n; ++k) sum += s[k] = t[k - j];
  }
  return sum;
}

void scale_probs(float* s, int64_t n, float inv, bool to_f16) {
  const __m256 iv = _mm256_set1_ps(inv);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    __m256 p = _mm256_mul_ps(_mm256_loadu_ps(s + j), iv);
    if (to_f16) p = _mm256_cvtph_ps(_mm256_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT));
    _mm256_storeu_ps(s + j, p);
  }
  for (; j < n; ++j) s[j] = to_f16 ? round_to_half(s[j] * inv) : s[j] * inv;
}

}  // namespace

const KernelTable kAvx2Kernels{
    "avx2",      quantize_act, matmul_quant, nullptr,     matmul_float, matmul_scaled,
    rmsnorm_row, silu_mul,     add,          attn_scores, softmax_exp,  scale_probs,
    attn_values, gelu_mul,
};

}  // namespace inferd::kernels::cpu
