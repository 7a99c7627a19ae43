// The block layouts of the quantized types (GGUF / ggml). Scales are IEEE halves
// stored as raw bits; every block holds 32 elements.
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

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ8_1) == 36);

}  // namespace inferd::kernels
