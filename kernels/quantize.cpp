#include "kernels/quantize.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "kernels/half.hpp"
#include "kernels/quant_blocks.hpp"

namespace inferd::kernels {

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  const int64_t nb = n / kQuantBlock;
  switch (t) {
    case DType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); return;
    case DType::F16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(s[i]);
      return;
    }
    case DType::BF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(s[i]);
      return;
    }
    case DType::Q4_0:
      for (int64_t b = 0; b < nb; ++b, dst += kQuantBlock) {
        const auto& blk = static_cast<const BlockQ4_0*>(src)[b];
        const float d = fp16_to_fp32(blk.d);
        for (int j = 0; j < 16; ++j) {
          dst[j] = static_cast<float>((blk.qs[j] & 0x0f) - 8) * d;
          dst[j + 16] = static_cast<float>((blk.qs[j] >> 4) - 8) * d;
        }
      }
      return;
    case DType::Q4_1:
      for (int64_t b = 0; b < nb; ++b, dst += kQuantBlock) {
        const auto& blk = static_cast<const BlockQ4_1*>(src)[b];
        const float d = fp16_to_fp32(blk.d), m = fp16_to_fp32(blk.m);
        for (int j = 0; j < 16; ++j) {
          dst[j] = static_cast<float>(blk.qs[j] & 0x0f) * d + m;
          dst[j + 16] = static_cast<float>(blk.qs[j] >> 4) * d + m;
        }
      }
      return;
    case DType::Q8_0:
      for (int64_t b = 0; b < nb; ++b, dst += kQuantBlock) {
        const auto& blk = static_cast<const BlockQ8_0*>(src)[b];
        const float d = fp16_to_fp32(blk.d);
        for (int j = 0; j < kQuantBlock; ++j) dst[j] = static_cast<float>(blk.qs[j]) * d;
      }
      return;
    case DType::Q8_1:
      for (int64_t b = 0; b < nb; ++b, dst += kQuantBlock) {
        const auto& blk = static_cast<const BlockQ8_1*>(src)[b];
        const float d = fp16_to_fp32(blk.d);
        for (int j = 0; j < kQuantBlock; ++j) dst[j] = static_cast<float>(blk.qs[j]) * d;
      }
      return;
  }
  throw std::invalid_argument("dequantize_row: unsupported type");
}

namespace {

float abs_max(const float* x) {
  float m = 0;
  for (int j = 0; j < kQuantBlock; ++j) m = std::max(m, std::fabs(x[j]));
  return m;
}

}  // namespace

void quantize_row(DType t, const float* src, void* dst, int64_t n) {
  const int64_t nb = n / kQuantBlock;
  switch (t) {
    case DType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); return;
    case DType::F16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = fp32_to_fp16(src[i]);
      return;
    }
    case DType::BF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = fp32_to_bf16(src[i]);
      return;
    }
    case DType::Q4_0:
      // The element of largest magnitude maps to -8, so its sign picks the scale's.
      for (int64_t b = 0; b < nb; ++b, src += kQuantBlock) {
        float amax = 0, vmax = 0;
        for (int j = 0; j < kQuantBlock; ++j)
          if (std::fabs(src[j]) > amax) amax = std::fabs(src[j]), vmax = src[j];
        const float d = vmax / -8.0f, id = d != 0 ? 1.0f / d : 0.0f;
        auto& blk = static_cast<BlockQ4_0*>(dst)[b];
        blk.d = fp32_to_fp16(d);
        for (int j = 0; j < 16; ++j) {
          const int lo = std::min(15, static_cast<int>(src[j] * id + 8.5f));
          const int hi = std::min(15, static_cast<int>(src[j + 16] * id + 8.5f));
          blk.qs[j] = static_cast<uint8_t>(lo | (hi << 4));
        }
      }
      return;
    case DType::Q4_1:
      for (int64_t b = 0; b < nb; ++b, src += kQuantBlock) {
        const auto [lo_it, hi_it] = std::minmax_element(src, src + kQuantBlock);
        const float mn = *lo_it, d = (*hi_it - mn) / 15.0f, id = d != 0 ? 1.0f / d : 0.0f;
        auto& blk = static_cast<BlockQ4_1*>(dst)[b];
        blk.d = fp32_to_fp16(d);
        blk.m = fp32_to_fp16(mn);
        for (int j = 0; j < 16; ++j) {
          const int lo = std::min(15, static_cast<int>((src[j] - mn) * id + 0.5f));
          const int hi = std::min(15, static_cast<int>((src[j + 16] - mn) * id + 0.5f));
          blk.qs[j] = static_cast<uint8_t>(lo | (hi << 4));
        }
      }
      return;
    case DType::Q8_0:
    case DType::Q8_1:
      for (int64_t b = 0; b < nb; ++b, src += kQuantBlock) {
        const float d = abs_max(src) / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
        int8_t* qs;
        int sum = 0;
        int8_t q[kQuantBlock];
        for (int j = 0; j < kQuantBlock; ++j) sum += q[j] = static_cast<int8_t>(std::lround(src[j] * id));
        if (t == DType::Q8_0) {
          auto& blk = static_cast<BlockQ8_0*>(dst)[b];
          blk.d = fp32_to_fp16(d);
          qs = blk.qs;
        } else {
          auto& blk = static_cast<BlockQ8_1*>(dst)[b];
          blk.d = fp32_to_fp16(d);
          blk.s = fp32_to_fp16(d * static_cast<float>(sum));
          qs = blk.qs;
        }
        std::memcpy(qs, q, sizeof q);
      }
      return;
  }
  throw std::invalid_argument("quantize_row: unsupported type");
}

}  // namespace inferd::kernels
