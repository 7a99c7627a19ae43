// Weights stored as small floats with a separate tensor of scales, as
// DeepSeek-V4's checkpoints hold them (and safetensors maps them: the view points
// at the mapped bytes, nothing is copied):
// - Fp8Block: e4m3fn bytes [rows][cols], one scale per 128 x 128 block
//   [ceil(rows / 128)][ceil(cols / 128)], E8M0 bytes or float32 (the checkpoint's
//   scale_inv): W[r][c] = e4m3(w[r][c]) * scale[r / 128][c / 128].
// - Mxfp4: E2M1 codes two per byte [rows][cols / 2], element 2i in the LOW nibble
//   of byte i and 2i + 1 in the high one; one E8M0 scale per 32 consecutive
//   elements of a row [rows][cols / 32]: W[r][c] = e2m1(code) * scale[r][c / 32].
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace inferd::kernels {

enum class ScaledFormat : uint8_t { Fp8Block, Mxfp4 };
enum class ScaleType : uint8_t { E8M0, F32 };

struct ScaledWeightView {
  ScaledFormat format = ScaledFormat::Fp8Block;
  ScaleType scale_type = ScaleType::E8M0;  // Mxfp4: E8M0 only
  const void* data = nullptr;
  const void* scales = nullptr;
  int64_t rows = 0;  // output features
  int64_t cols = 0;  // input features (Mxfp4: a multiple of 32)
};

inline constexpr int64_t kFp8BlockSize = 128;  // Fp8Block: a scale per 128 x 128
inline constexpr int64_t kMxfp4BlockSize = 32;  // Mxfp4: a scale per 32 along a row

const char* format_name(ScaledFormat f);

// The exact values of the element and scale encodings. e4m3fn: 1 sign, 4 exponent
// (bias 7), 3 mantissa bits, subnormals, no infinity, 0x7f / 0xff are NaN. E8M0:
// 2^(b - 127), 255 is NaN. E2M1: {0, .5, 1, 1.5, 2, 3, 4, 6}, bit 3 the sign.
float e4m3fn_to_float(uint8_t b);
float e8m0_to_float(uint8_t b);
float e2m1_to_float(uint8_t code);  // the low 4 bits of code

// The float32 bits of E8M0 byte b (2^-127 is a subnormal).
// This and scale_at are static: the SIMD kernels' files, compiled for other
// instruction sets, use them too, and their copies must never be the one the
// portable code links to.
static inline uint32_t e8m0_float_bits(uint8_t b) {
  return b == 255 ? 0x7fc00000u : b == 0 ? 0x00400000u : static_cast<uint32_t>(b) << 23;
}

// The scales tensor's shape, and both tensors' sizes in bytes.
int64_t scale_rows(const ScaledWeightView& w);
int64_t scale_cols(const ScaledWeightView& w);
size_t data_bytes(const ScaledWeightView& w);
size_t scale_bytes(const ScaledWeightView& w);

// The scale of element (r, c).
static inline float scale_at(const ScaledWeightView& w, int64_t r, int64_t c) {
  const auto* s = static_cast<const uint8_t*>(w.scales);
  const int64_t i = w.format == ScaledFormat::Mxfp4
                        ? r * (w.cols / kMxfp4BlockSize) + c / kMxfp4BlockSize
                        : (r / kFp8BlockSize) * ((w.cols + kFp8BlockSize - 1) / kFp8BlockSize) + c / kFp8BlockSize;
  float f;
  if (w.scale_type == ScaleType::F32) {
    std::memcpy(&f, s + i * 4, 4);
  } else {
    const uint32_t bits = e8m0_float_bits(s[i]);
    std::memcpy(&f, &bits, 4);
  }
  return f;
}

// Throws std::invalid_argument naming `op` and the field when the view cannot be
// read: null pointers, negative sizes, Mxfp4 cols not a multiple of 32 or with
// float scales.
void check_view(const ScaledWeightView& w, const char* op);
// Every element as float32, out: [rows][cols]. The reference the kernels are checked against.
void dequantize(const ScaledWeightView& w, float* out);

}  // namespace inferd::kernels
