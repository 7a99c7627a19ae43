// Portable C++ kernels: the fallback on any CPU and the reference for the SIMD
// tables. They compute the same quantities in the same formulation (same
// activation quantization bits, same per-block integer dot products and scale
// products), only the float summation order differs.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/kernel_table.hpp"
#include "kernels/half.hpp"
#include "kernels/quant_blocks.hpp"

namespace inferd::kernels::cpu {
namespace {

void quantize_act(DType weight, const float* x, int64_t n, ActTile* tiles, int slot) {
  for (int64_t b = 0; b < n / kQuantBlock; ++b, x += kQuantBlock) {
    float amax = 0;
    for (int j = 0; j < kQuantBlock; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    const float d = amax / 127.0f, id = amax != 0 ? 127.0f / amax : 0.0f;
    ActTile& a = tiles[b];
    int sum = 0;
    for (int j = 0; j < kQuantBlock; ++j) sum += a.q[slot][j] = static_cast<int8_t>(std::nearbyint(x[j] * id));
    a.d[slot] = fp16_to_fp32(fp32_to_fp16(d));
    a.c[slot] = act_correction(weight, d, a.d[slot], sum);
    if (act_correction_is_half(weight)) a.c[slot] = fp16_to_fp32(fp32_to_fp16(a.c[slot]));
  }
}

// Integer dot of 32 unsigned 5-bit values (Q5_0 / Q5_1: nibbles as Q4_0, bit 4 in qh) with 32 int8.
int dot_5bit(const uint8_t* qs, const uint8_t* qh_bytes, const int8_t* a) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  int s = 0;
  for (int j = 0; j < 16; ++j)
    s += ((qs[j] & 0x0f) | static_cast<int>((qh >> j) & 1) << 4) * a[j] +
         ((qs[j] >> 4) | static_cast<int>((qh >> (j + 16)) & 1) << 4) * a[j + 16];
  return s;
}

// Integer dot of 32 unsigned nibbles (layout of Q4_0 / Q4_1) with 32 int8.
int dot_nibbles(const uint8_t* qs, const int8_t* a) {
  int s = 0;
  for (int j = 0; j < 16; ++j) s += (qs[j] & 0x0f) * a[j] + (qs[j] >> 4) * a[j + 16];
  return s;
}

// Row . token: the blocks' scaled integer dots, plus the correction terms summed apart.
template <class Block>
float dot_row(const Block* w, const ActTile* x, int slot, int64_t nb) {
  float sum = 0, corr = 0;
  for (int64_t b = 0; b < nb; ++b) {
    const ActTile& a = x[b];
    const float d = fp16_to_fp32(w[b].d);
    int idot;
    if constexpr (std::is_same_v<Block, BlockQ8_0>) {
      idot = 0;
      for (int j = 0; j < kQuantBlock; ++j) idot += w[b].qs[j] * a.q[slot][j];
    } else if constexpr (std::is_same_v<Block, BlockQ5_0> || std::is_same_v<Block, BlockQ5_1>) {
      idot = dot_5bit(w[b].qs, w[b].qh, a.q[slot]);
      if constexpr (std::is_same_v<Block, BlockQ5_1>)
        corr += fp16_to_fp32(w[b].m) * a.c[slot];
      else
        corr += d * a.c[slot];
    } else {
      idot = dot_nibbles(w[b].qs, a.q[slot]);
      if constexpr (std::is_same_v<Block, BlockQ4_1>)
        corr += fp16_to_fp32(w[b].m) * a.c[slot];
      else
        corr += d * a.c[slot];
    }
    sum += static_cast<float>(idot) * (d * a.d[slot]);
  }
  return sum + corr;
}

// The k-quants: each sub-block of 32 is a block of the sum above, with scale
// d * sc and correction factor dmin * m (Q4_K, Q5_K); Q6_K's two halves of 16
// each add their own product, low half first, and it has no correction.
template <class Block>
float dot_row_k(const Block* w, const ActTile* x, int slot, int64_t nb) {
  float sum = 0, corr = 0;
  for (int64_t b = 0; b < nb; ++b) {
    const Block& blk = w[b / 8];
    const int j = static_cast<int>(b % 8);
    const ActTile& a = x[b];
    const int8_t* aq = a.q[slot];
    if constexpr (std::is_same_v<Block, BlockQ6_K>) {
      const int n = j / 4, k = j % 4;
      const uint8_t* ql = blk.ql + 64 * n + 32 * (k % 2);
      const uint8_t* qh = blk.qh + 32 * n;
      int half[2] = {0, 0};
      for (int l = 0; l < 32; ++l) {
        const int q = ((k < 2 ? ql[l] & 0x0f : ql[l] >> 4) | ((qh[l] >> (2 * k)) & 3) << 4) - 32;
        half[l / 16] += q * aq[l];
      }
      const float d = fp16_to_fp32(blk.d);
      sum += static_cast<float>(half[0]) * ((d * static_cast<float>(blk.scales[2 * j])) * a.d[slot]);
      sum += static_cast<float>(half[1]) * ((d * static_cast<float>(blk.scales[2 * j + 1])) * a.d[slot]);
    } else {
      int sc, m;
      k_scale_min(blk.scales, j, sc, m);
      const uint8_t* qs = blk.qs + 32 * (j / 2);
      int idot = 0;
      for (int l = 0; l < 32; ++l) {
        int q = j % 2 ? qs[l] >> 4 : qs[l] & 0x0f;
        if constexpr (std::is_same_v<Block, BlockQ5_K>) q |= ((blk.qh[l] >> j) & 1) << 4;
        idot += q * aq[l];
      }
      const float dsc = fp16_to_fp32(blk.d) * static_cast<float>(sc);
      sum += static_cast<float>(idot) * (dsc * a.d[slot]);
      corr += (fp16_to_fp32(blk.dmin) * static_cast<float>(m)) * a.c[slot];
    }
  }
  return sum + corr;
}

template <class Block>
void matmul_quant_k(const WeightView& w, const ActTile* xq, int64_t n_tokens, float* y, int64_t ldy, int64_t r0,
                    int64_t r1) {
  const int64_t nb = w.cols / kQuantBlock;
  for (int64_t r = r0; r < r1; ++r) {
    const auto* row = reinterpret_cast<const Block*>(static_cast<const uint8_t*>(w.data) + r * w.row_stride);
    for (int64_t t = 0; t < n_tokens; ++t)
      y[t * ldy + r] = dot_row_k(row, xq + (t / kActTileTokens) * nb, static_cast<int>(t % kActTileTokens), nb);
  }
}

template <class Block>
void matmul_quant_typed(const WeightView& w, const ActTile* xq, int64_t n_tokens, float* y, int64_t ldy,
                        int64_t r0, int64_t r1) {
  const int64_t nb = w.cols / kQuantBlock;
  for (int64_t r = r0; r < r1; ++r) {
    const auto* row = reinterpret_cast<const Block*>(static_cast<const uint8_t*>(w.data) + r * w.row_stride);
    for (int64_t t = 0; t < n_tokens; ++t)
      y[t * ldy + r] = dot_row(row, xq + (t / kActTileTokens) * nb, static_cast<int>(t % kActTileTokens), nb);
  }
}

void matmul_quant(const WeightView& w, const ActTile* xq, int64_t n_tokens, float* y, int64_t ldy, int64_t r0,
                  int64_t r1) {
  switch (w.type) {
    case DType::Q4_0: return matmul_quant_typed<BlockQ4_0>(w, xq, n_tokens, y, ldy, r0, r1);
    case DType::Q4_1: return matmul_quant_typed<BlockQ4_1>(w, xq, n_tokens, y, ldy, r0, r1);
    case DType::Q5_0: return matmul_quant_typed<BlockQ5_0>(w, xq, n_tokens, y, ldy, r0, r1);
    case DType::Q5_1: return matmul_quant_typed<BlockQ5_1>(w, xq, n_tokens, y, ldy, r0, r1);
    case DType::Q4_K: return matmul_quant_k<BlockQ4_K>(w, xq, n_tokens, y, ldy, r0, r1);
    case DType::Q5_K: return matmul_quant_k<BlockQ5_K>(w, xq, n_tokens, y, ldy, r0, r1);
    case DType::Q6_K: return matmul_quant_k<BlockQ6_K>(w, xq, n_tokens, y, ldy, r0, r1);
    default: return matmul_quant_typed<BlockQ8_0>(w, xq, n_tokens, y, ldy, r0, r1);
  }
}

template <class Load>
void matmul_rows(const WeightView& w, const float* x, int64_t n_tokens, float* y, int64_t ldy, int64_t r0,
                 int64_t r1, Load load) {
  for (int64_t r = r0; r < r1; ++r) {
    const auto* row = reinterpret_cast<const uint8_t*>(w.data) + r * w.row_stride;
    for (int64_t t = 0; t < n_tokens; ++t) {
      const float* xt = x + t * w.cols;
      float sum = 0;
      for (int64_t c = 0; c < w.cols; ++c) sum += load(row, c) * xt[c];
      y[t * ldy + r] = sum;
    }
  }
}

void matmul_float(const WeightView& w, const float* x, int64_t n_tokens, float* y, int64_t ldy, int64_t r0,
                  int64_t r1, float*) {
  switch (w.type) {
    case DType::F16:
      return matmul_rows(w, x, n_tokens, y, ldy, r0, r1, [](const uint8_t* row, int64_t c) {
        return fp16_to_fp32(reinterpret_cast<const uint16_t*>(row)[c]);
      });
    case DType::BF16:
      return matmul_rows(w, x, n_tokens, y, ldy, r0, r1, [](const uint8_t* row, int64_t c) {
        return bf16_to_fp32(reinterpret_cast<const uint16_t*>(row)[c]);
      });
    default:
      return matmul_rows(w, x, n_tokens, y, ldy, r0, r1,
                         [](const uint8_t* row, int64_t c) { return reinterpret_cast<const float*>(row)[c]; });
  }
}

// Row r . token x of a scaled weight: each block's products summed, then scaled
// and added. The element decoders' values through tables built once.
float dot_scaled_row(const ScaledWeightView& w, int64_t r, const float* x) {
  static const struct Tables {
    float e4m3[256], e2m1[16];
    Tables() {
      for (int b = 0; b < 256; ++b) e4m3[b] = e4m3fn_to_float(static_cast<uint8_t>(b));
      for (int c = 0; c < 16; ++c) e2m1[c] = e2m1_to_float(static_cast<uint8_t>(c));
    }
  } lut;
  float sum = 0;
  if (w.format == ScaledFormat::Mxfp4) {
    const auto* q = static_cast<const uint8_t*>(w.data) + r * (w.cols / 2);
    for (int64_t c0 = 0; c0 < w.cols; c0 += kMxfp4BlockSize, q += 16) {
      float part = 0;
      for (int j = 0; j < 16; ++j) part += lut.e2m1[q[j] & 15] * x[c0 + j] + lut.e2m1[q[j] >> 4] * x[c0 + 16 + j];
      sum += part * scale_at(w, r, c0);
    }
    return sum;
  }
  const auto* q = static_cast<const uint8_t*>(w.data) + r * w.cols;
  for (int64_t c0 = 0; c0 < w.cols; c0 += kFp8BlockSize) {
    const int64_t c1 = std::min(w.cols, c0 + kFp8BlockSize);
    float part = 0;
    for (int64_t c = c0; c < c1; ++c) part += lut.e4m3[q[c]] * x[c];
    sum += part * scale_at(w, r, c0);
  }
  return sum;
}

void matmul_scaled(const ScaledWeightView& w, const float* x, int64_t n_tokens, float* y, int64_t ldy, int64_t r0,
                   int64_t r1) {
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t t = 0; t < n_tokens; ++t) y[t * ldy + r] = dot_scaled_row(w, r, x + t * w.cols);
}

// Like the reference: squares in float, summed in double.
void rmsnorm_row(const float* x, const float* weight, float* y, int64_t n, float eps) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(mean + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = (x[i] * scale) * weight[i];
}

void silu_mul(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void gelu_mul(const float* gate, const float* up, float* out, int64_t n) {
  constexpr float k = 2.0f * 0.7978845608f;  // 2 * sqrt(2 / pi)
  for (int64_t i = 0; i < n; ++i) {
    const float x = gate[i];
    out[i] = x / (1.0f + std::exp(-k * (x + 0.044715f * x * x * x))) * up[i];
  }
}

void add(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

inline float kv_value(const float* p, int i) { return p[i]; }
inline float kv_value(const uint16_t* p, int i) { return fp16_to_fp32(p[i]); }

template <class T>
const T* kv_row(const KvLayerView& kv, const void* base, const int32_t* block_table, int32_t pos, int kv_head) {
  const int64_t slot = int64_t(block_table[pos / kv.block_size]) * kv.block_size + pos % kv.block_size;
  return static_cast<const T*>(base) + (slot * kv.n_kv_heads + kv_head) * kv.head_dim;
}

template <class T>
void attn_scores_typed(const KvLayerView& kv, const int32_t* block_table, int32_t p0, int32_t p1, const float* q,
                       int nq, int kv_head, float scale, float* s, int64_t ld) {
  const int hd = kv.head_dim;
  for (int32_t p = p0; p < p1; ++p) {
    const T* k = kv_row<T>(kv, kv.k, block_table, p, kv_head);
    for (int i = 0; i < nq; ++i) {
      float d = 0;
      for (int c = 0; c < hd; ++c) d += q[int64_t(i) * hd + c] * kv_value(k, c);
      s[i * ld + (p - p0)] = d * scale;
    }
  }
}

void attn_scores(const KvLayerView& kv, const int32_t* block_table, int32_t p0, int32_t p1, const float* q, int nq,
                 int kv_head, float scale, float* s, int64_t ld) {
  if (kv.type == DType::F16)
    attn_scores_typed<uint16_t>(kv, block_table, p0, p1, q, nq, kv_head, scale, s, ld);
  else
    attn_scores_typed<float>(kv, block_table, p0, p1, q, nq, kv_head, scale, s, ld);
}

double softmax_exp(float* s, int64_t n) {
  float mx = -INFINITY;
  for (int64_t j = 0; j < n; ++j) mx = std::max(mx, s[j]);
  double sum = 0;
  for (int64_t j = 0; j < n; ++j) sum += s[j] = std::exp(s[j] - mx);
  return sum;
}

void scale_probs(float* s, int64_t n, float inv, bool to_f16) {
  for (int64_t j = 0; j < n; ++j) s[j] = to_f16 ? fp16_to_fp32(fp32_to_fp16(s[j] * inv)) : s[j] * inv;
}

template <class T>
void attn_values_typed(const KvLayerView& kv, const int32_t* block_table, int32_t p0, int32_t p1, const float* w,
                       int64_t ld, int nq, int kv_head, float* acc) {
  const int hd = kv.head_dim;
  for (int32_t p = p0; p < p1; ++p) {
    const T* v = kv_row<T>(kv, kv.v, block_table, p, kv_head);
    for (int i = 0; i < nq; ++i) {
      const float wi = w[i * ld + (p - p0)];
      for (int c = 0; c < hd; ++c) acc[int64_t(i) * hd + c] += wi * kv_value(v, c);
    }
  }
}

void attn_values(const KvLayerView& kv, const int32_t* block_table, int32_t p0, int32_t p1, const float* w,
                 int64_t ld, int nq, int kv_head, float* acc) {
  if (kv.type == DType::F16)
    attn_values_typed<uint16_t>(kv, block_table, p0, p1, w, ld, nq, kv_head, acc);
  else
    attn_values_typed<float>(kv, block_table, p0, p1, w, ld, nq, kv_head, acc);
}

}  // namespace

const KernelTable kScalarKernels{
    "scalar",    quantize_act, matmul_quant, nullptr,     matmul_float, matmul_scaled,
    rmsnorm_row, silu_mul,     add,          attn_scores, softmax_exp,  scale_probs,
    attn_values, gelu_mul,
};

}  // namespace inferd::kernels::cpu
