#include "kernels/scaled_weight.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace inferd::kernels {

const char* format_name(ScaledFormat f) { return f == ScaledFormat::Mxfp4 ? "mxfp4" : "fp8_block"; }

float e4m3fn_to_float(uint8_t b) {
  const int e = (b >> 3) & 15, m = b & 7;
  if (e == 15 && m == 7) return std::numeric_limits<float>::quiet_NaN();
  // Normal: (1 + m/8) * 2^(e - 7) = (8 + m) * 2^(e - 10); subnormal: m/8 * 2^-6.
  const float v = e == 0 ? std::ldexp(static_cast<float>(m), -9) : std::ldexp(static_cast<float>(8 + m), e - 10);
  return b & 0x80 ? -v : v;
}

float e8m0_to_float(uint8_t b) {
  if (b == 255) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, b - 127);
}

float e2m1_to_float(uint8_t code) {
  static constexpr float kMagnitude[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float v = kMagnitude[code & 7];
  return code & 8 ? -v : v;
}

int64_t scale_rows(const ScaledWeightView& w) {
  return w.format == ScaledFormat::Mxfp4 ? w.rows : (w.rows + kFp8BlockSize - 1) / kFp8BlockSize;
}

int64_t scale_cols(const ScaledWeightView& w) {
  return w.format == ScaledFormat::Mxfp4 ? w.cols / kMxfp4BlockSize : (w.cols + kFp8BlockSize - 1) / kFp8BlockSize;
}

size_t data_bytes(const ScaledWeightView& w) {
  return static_cast<size_t>(w.rows) * static_cast<size_t>(w.format == ScaledFormat::Mxfp4 ? w.cols / 2 : w.cols);
}

size_t scale_bytes(const ScaledWeightView& w) {
  return static_cast<size_t>(scale_rows(w) * scale_cols(w)) * (w.scale_type == ScaleType::F32 ? 4 : 1);
}

void check_view(const ScaledWeightView& w, const char* op) {
  const std::string what = std::string(op) + " (" + format_name(w.format) + " weight): ";
  if (w.rows < 0 || w.cols < 0)
    throw std::invalid_argument(what + "negative shape [" + std::to_string(w.rows) + ", " + std::to_string(w.cols) +
                                "]");
  if (w.format == ScaledFormat::Mxfp4 && w.cols % kMxfp4BlockSize != 0)
    throw std::invalid_argument(what + "cols " + std::to_string(w.cols) + " is not a multiple of 32");
  if (w.format == ScaledFormat::Mxfp4 && w.scale_type != ScaleType::E8M0)
    throw std::invalid_argument(what + "scales must be E8M0");
  if (w.rows > 0 && w.cols > 0 && (!w.data || !w.scales))
    throw std::invalid_argument(what + (w.data ? "scales" : "data") + " pointer is null");
}

void dequantize(const ScaledWeightView& w, float* out) {
  check_view(w, "dequantize");
  const auto* q = static_cast<const uint8_t*>(w.data);
  for (int64_t r = 0; r < w.rows; ++r)
    for (int64_t c = 0; c < w.cols; ++c) {
      const float v = w.format == ScaledFormat::Mxfp4
                          ? e2m1_to_float(static_cast<uint8_t>(q[r * (w.cols / 2) + c / 2] >> (c % 2 ? 4 : 0)))
                          : e4m3fn_to_float(q[r * w.cols + c]);
      out[r * w.cols + c] = v * scale_at(w, r, c);
    }
}

}  // namespace inferd::kernels
