#include "kernels/quantize.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "kernels/half.hpp"
#include "kernels/quant_blocks.hpp"

namespace inferd::kernels {
namespace {

uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Bit j of qh as bit 4 of an element (int, so that q - 16 is signed).
int hi_bit(uint32_t qh, int j) { return static_cast<int>((qh >> j) & 1) << 4; }

// Element e's signed 6-bit value (q - 32) of a Q6_K block.
int q6k_value(const BlockQ6_K& blk, int e) {
  const int n = e / 128, k = (e % 128) / 32, l = e % 32;
  const uint8_t lo = blk.ql[64 * n + 32 * (k % 2) + l];
  const int low = k < 2 ? lo & 0x0f : lo >> 4;
  return (low | ((blk.qh[32 * n + l] >> (2 * k)) & 3) << 4) - 32;
}

int nearest(float x) { return static_cast<int>(std::nearbyint(x)); }

// Q4_K / Q5_K (levels 15 / 31): each sub-block of 32 gets scale and min from its
// range, both then quantized to 6 bits against the block's largest.
void quantize_k(DType t, const float* x, uint8_t* dst) {
  const int levels = t == DType::Q5_K ? 31 : 15;
  float scale[8], minv[8], max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    float lo = 0, hi = x[32 * j];
    for (int l = 0; l < 32; ++l) lo = std::min(lo, x[32 * j + l]), hi = std::max(hi, x[32 * j + l]);
    scale[j] = (hi - lo) / static_cast<float>(levels);
    minv[j] = -lo;
    max_scale = std::max(max_scale, scale[j]);
    max_min = std::max(max_min, minv[j]);
  }
  auto& h = *reinterpret_cast<BlockQ4_K*>(dst);
  h.d = fp32_to_fp16(max_scale / 63.0f);
  h.dmin = fp32_to_fp16(max_min / 63.0f);
  std::memset(h.scales, 0, sizeof h.scales);
  uint8_t* qh = t == DType::Q5_K ? reinterpret_cast<BlockQ5_K*>(dst)->qh : nullptr;
  uint8_t* qs = t == DType::Q5_K ? reinterpret_cast<BlockQ5_K*>(dst)->qs : h.qs;
  if (qh) std::memset(qh, 0, 32);
  std::memset(qs, 0, 128);
  const float d = fp16_to_fp32(h.d), dmin = fp16_to_fp32(h.dmin);
  for (int j = 0; j < 8; ++j) {
    const int ls = max_scale > 0 ? std::min(63, nearest(scale[j] * 63.0f / max_scale)) : 0;
    const int lm = max_min > 0 ? std::min(63, nearest(minv[j] * 63.0f / max_min)) : 0;
    if (j < 4) {
      h.scales[j] = static_cast<uint8_t>(ls);
      h.scales[j + 4] = static_cast<uint8_t>(lm);
    } else {
      h.scales[j + 4] = static_cast<uint8_t>((ls & 0x0f) | ((lm & 0x0f) << 4));
      h.scales[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      h.scales[j] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
    const float dd = d * static_cast<float>(ls), dm = dmin * static_cast<float>(lm);
    for (int l = 0; l < 32; ++l) {
      const int q = dd > 0 ? std::clamp(nearest((x[32 * j + l] + dm) / dd), 0, levels) : 0;
      qs[32 * (j / 2) + l] |= static_cast<uint8_t>((q & 0x0f) << (4 * (j % 2)));
      if (qh) qh[l] |= static_cast<uint8_t>((q >> 4) << j);
    }
  }
}

// Q6_K: a signed scale per 16 (the element of largest magnitude maps to -32),
// the scales quantized to int8 against the largest.
void quantize_q6k(const float* x, BlockQ6_K& blk) {
  float scale[16], max_abs = 0;
  for (int k = 0; k < 16; ++k) {
    float amax = 0, vmax = 0;
    for (int l = 0; l < 16; ++l)
      if (std::fabs(x[16 * k + l]) > amax) amax = std::fabs(x[16 * k + l]), vmax = x[16 * k + l];
    scale[k] = vmax / -32.0f;
    max_abs = std::max(max_abs, std::fabs(scale[k]));
  }
  blk.d = fp32_to_fp16(max_abs / 127.0f);
  const float d = fp16_to_fp32(blk.d);
  std::memset(blk.ql, 0, sizeof blk.ql);
  std::memset(blk.qh, 0, sizeof blk.qh);
  for (int k = 0; k < 16; ++k) {
    const int sc = d > 0 ? std::clamp(nearest(scale[k] / d), -128, 127) : 0;
    blk.scales[k] = static_cast<int8_t>(sc);
    const float dd = d * static_cast<float>(sc);
    for (int l = 0; l < 16; ++l) {
      const int e = 16 * k + l, n = e / 128, kk = (e % 128) / 32, ll = e % 32;
      const int q = dd != 0 ? std::clamp(nearest(x[e] / dd) + 32, 0, 63) : 32;
      blk.ql[64 * n + 32 * (kk % 2) + ll] |= static_cast<uint8_t>((q & 0x0f) << (4 * (kk / 2)));
      blk.qh[32 * n + ll] |= static_cast<uint8_t>((q >> 4) << (2 * kk));
    }
  }
}

}  // namespace

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
    case DType::Q5_0:
      for (int64_t b = 0; b < nb; ++b, dst += kQuantBlock) {
        const auto& blk = static_cast<const BlockQ5_0*>(src)[b];
        const float d = fp16_to_fp32(blk.d);
        const uint32_t qh = load_u32(blk.qh);
        for (int j = 0; j < 16; ++j) {
          dst[j] = static_cast<float>(((blk.qs[j] & 0x0f) | hi_bit(qh, j)) - 16) * d;
          dst[j + 16] = static_cast<float>(((blk.qs[j] >> 4) | hi_bit(qh, j + 16)) - 16) * d;
        }
      }
      return;
    case DType::Q5_1:
      for (int64_t b = 0; b < nb; ++b, dst += kQuantBlock) {
        const auto& blk = static_cast<const BlockQ5_1*>(src)[b];
        const float d = fp16_to_fp32(blk.d), m = fp16_to_fp32(blk.m);
        const uint32_t qh = load_u32(blk.qh);
        for (int j = 0; j < 16; ++j) {
          dst[j] = static_cast<float>((blk.qs[j] & 0x0f) | hi_bit(qh, j)) * d + m;
          dst[j + 16] = static_cast<float>((blk.qs[j] >> 4) | hi_bit(qh, j + 16)) * d + m;
        }
      }
      return;
    case DType::Q4_K:
    case DType::Q5_K:
      for (int64_t b = 0; b < n / kSuperBlock; ++b, dst += kSuperBlock) {
        // Q4_K and Q5_K share the head; Q5_K adds qh before the nibbles.
        const uint8_t* blk = static_cast<const uint8_t*>(src) + b * traits(t).block_bytes;
        const auto& h = *reinterpret_cast<const BlockQ4_K*>(blk);
        const uint8_t* qh = t == DType::Q5_K ? reinterpret_cast<const BlockQ5_K*>(blk)->qh : nullptr;
        const uint8_t* qs = t == DType::Q5_K ? reinterpret_cast<const BlockQ5_K*>(blk)->qs : h.qs;
        const float d = fp16_to_fp32(h.d), dmin = fp16_to_fp32(h.dmin);
        for (int j = 0; j < 8; ++j) {
          int sc, m;
          k_scale_min(h.scales, j, sc, m);
          const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
          const uint8_t* q = qs + 32 * (j / 2);
          for (int l = 0; l < 32; ++l) {
            int v = j % 2 ? q[l] >> 4 : q[l] & 0x0f;
            if (qh) v |= ((qh[l] >> j) & 1) << 4;
            dst[32 * j + l] = d1 * static_cast<float>(v) - m1;
          }
        }
      }
      return;
    case DType::Q6_K:
      for (int64_t b = 0; b < n / kSuperBlock; ++b, dst += kSuperBlock) {
        const auto& blk = static_cast<const BlockQ6_K*>(src)[b];
        const float d = fp16_to_fp32(blk.d);
        for (int e = 0; e < kSuperBlock; ++e) dst[e] = d * static_cast<float>(blk.scales[e / 16]) *
                                                       static_cast<float>(q6k_value(blk, e));
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
    case DType::Q5_0:
      for (int64_t b = 0; b < nb; ++b, src += kQuantBlock) {
        float amax = 0, vmax = 0;
        for (int j = 0; j < kQuantBlock; ++j)
          if (std::fabs(src[j]) > amax) amax = std::fabs(src[j]), vmax = src[j];
        const float d = vmax / -16.0f, id = d != 0 ? 1.0f / d : 0.0f;
        auto& blk = static_cast<BlockQ5_0*>(dst)[b];
        blk.d = fp32_to_fp16(d);
        uint32_t qh = 0;
        for (int j = 0; j < 16; ++j) {
          const int lo = std::min(31, static_cast<int>(src[j] * id + 16.5f));
          const int hi = std::min(31, static_cast<int>(src[j + 16] * id + 16.5f));
          blk.qs[j] = static_cast<uint8_t>((lo & 0x0f) | ((hi & 0x0f) << 4));
          qh |= static_cast<uint32_t>(lo >> 4) << j | static_cast<uint32_t>(hi >> 4) << (j + 16);
        }
        std::memcpy(blk.qh, &qh, 4);
      }
      return;
    case DType::Q5_1:
      for (int64_t b = 0; b < nb; ++b, src += kQuantBlock) {
        const auto [lo_it, hi_it] = std::minmax_element(src, src + kQuantBlock);
        const float mn = *lo_it, d = (*hi_it - mn) / 31.0f, id = d != 0 ? 1.0f / d : 0.0f;
        auto& blk = static_cast<BlockQ5_1*>(dst)[b];
        blk.d = fp32_to_fp16(d);
        blk.m = fp32_to_fp16(mn);
        uint32_t qh = 0;
        for (int j = 0; j < 16; ++j) {
          const int lo = std::min(31, static_cast<int>((src[j] - mn) * id + 0.5f));
          const int hi = std::min(31, static_cast<int>((src[j + 16] - mn) * id + 0.5f));
          blk.qs[j] = static_cast<uint8_t>((lo & 0x0f) | ((hi & 0x0f) << 4));
          qh |= static_cast<uint32_t>(lo >> 4) << j | static_cast<uint32_t>(hi >> 4) << (j + 16);
        }
        std::memcpy(blk.qh, &qh, 4);
      }
      return;
    case DType::Q4_K:
    case DType::Q5_K:
      for (int64_t b = 0; b < n / kSuperBlock; ++b)
        quantize_k(t, src + b * kSuperBlock, static_cast<uint8_t*>(dst) + b * traits(t).block_bytes);
      return;
    case DType::Q6_K:
      for (int64_t b = 0; b < n / kSuperBlock; ++b) quantize_q6k(src + b * kSuperBlock, static_cast<BlockQ6_K*>(dst)[b]);
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
