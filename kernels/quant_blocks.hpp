// The block layouts of the quantized types (GGUF / ggml). Scales are IEEE halves
// stored as raw bits. The legacy blocks hold 32 elements, the k-quants 256.
#pragma once
#include <cstdint>

namespace inferd::kernels {

inline constexpr int kQuantBlock = 32;

// value = (q - 8) * d; element j < 16 is the low nibble of qs[j], j >= 16 the high nibble of qs[j - 16].
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[16];
};
// value = q * d + m, nibbles as in Q4_0.
struct BlockQ4_1 {
  uint16_t d, m;
  uint8_t qs[16];
};
// value = q * d.
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[32];
};
// value = q * d; s = d * sum(q).
struct BlockQ8_1 {
  uint16_t d, s;
  int8_t qs[32];
};

// value = (q - 16) * d; q's low four bits as in Q4_0, bit 4 of element j is bit j of qh (little endian).
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[16];
};
// value = q * d + m, q as in Q5_0.
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[16];
};

// The k-quants: 256 elements in 8 sub-blocks of 32 (Q6_K: 16 scales of 16).
inline constexpr int kSuperBlock = 256;
// Sub-block j (elements 32j..32j+31) has a 6-bit scale sc and min m packed in
// `scales` (see k_scale_min); value = d * sc * q - dmin * m. Its q are the low
// nibbles of qs[32 (j/2) ..] for even j, the high nibbles for odd j.
struct BlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qs[128];
};
// Q4_K with a fifth bit: bit 4 of element 32j + l is bit j of qh[l].
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
// value = d * scales[e / 16] * (q - 32), q of 6 bits: for element e = 128n + 32k + l,
// the low four bits are the low (k < 2) or high (k >= 2) nibble of ql[64n + 32(k%2) + l],
// the top two bits (qh[32n + l] >> 2k) & 3.
struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
};

// Sub-block j's (scale, min) of a Q4_K / Q5_K block: 6 bits each, ggml's packing.
inline void k_scale_min(const uint8_t* q, int j, int& sc, int& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

static_assert(sizeof(BlockQ5_0) == 22 && sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ4_K) == 144 && sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ8_1) == 36);

}  // namespace inferd::kernels
