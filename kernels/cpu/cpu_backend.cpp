// The CPU backend: validates arguments, registers each launch's shape key,
// splits the work over the thread pool and runs the inner loops of the kernel
// table chosen for this CPU.
#include "kernels/cpu/cpu_backend.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "faults/fault_points.hpp"
#include "kernels/cpu/kernel_table.hpp"
#include "kernels/half.hpp"
#include "kernels/host_memory.hpp"
#include "kernels/launch_keys.hpp"
#include "kernels/quantize.hpp"
#include "kernels/thread_pool.hpp"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace inferd::kernels {
namespace cpu {

namespace {

// What the CPU and the OS support, from cpuid and xgetbv directly: every
// compiler accepts this (clang 14 rejects __builtin_cpu_supports("f16c")).
struct CpuFeatures {
  bool avx2 = false;    // with FMA and F16C, ymm state enabled by the OS
  bool avx512 = false;  // F, BW, VL and VNNI, zmm and mask state enabled by the OS
};

CpuFeatures detect_cpu() {
  CpuFeatures f;
#if defined(__x86_64__)
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28), f16c = c & (1u << 29);
  if (!osxsave || !avx) return f;
  unsigned xcr0, xcr0_hi;
  __asm__("xgetbv" : "=a"(xcr0), "=d"(xcr0_hi) : "c"(0));
  if ((xcr0 & 0x6) != 0x6) return f;  // xmm and ymm registers saved on context switch
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  f.avx2 = (b & (1u << 5)) && fma && f16c;
  const bool zmm_state = (xcr0 & 0xe0) == 0xe0;  // opmask, zmm0-15 upper halves, zmm16-31
  const bool avx512f = b & (1u << 16), avx512bw = b & (1u << 30), avx512vl = b & (1u << 31);
  const bool vnni = c & (1u << 11);
  f.avx512 = f.avx2 && zmm_state && avx512f && avx512bw && avx512vl && vnni;
#endif
  return f;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect_cpu();
  return f;
}

}  // namespace

const KernelTable* avx2_kernels() {
#if INFERD_HAVE_AVX2_KERNELS
  return cpu_features().avx2 ? &kAvx2Kernels : nullptr;
#else
  return nullptr;
#endif
}

const KernelTable* avx512_kernels() {
#if INFERD_HAVE_AVX2_KERNELS && INFERD_HAVE_AVX512_KERNELS
  // kAvx512Kernels, with AVX2's ops where it has none.
  static const KernelTable table = [] {
    KernelTable k = kAvx512Kernels;
    const KernelTable& a = kAvx2Kernels;
    auto fill = [](auto& op, auto avx2_op) {
      if (!op) op = avx2_op;
    };
    fill(k.quantize_act, a.quantize_act);
    fill(k.matmul_quant, a.matmul_quant);
    if (!k.matmul_float) k.matmul_float_scratch = a.matmul_float_scratch;
    fill(k.matmul_float, a.matmul_float);
    fill(k.matmul_scaled, a.matmul_scaled);
    fill(k.rmsnorm_row, a.rmsnorm_row);
    fill(k.silu_mul, a.silu_mul);
    fill(k.add, a.add);
    fill(k.attn_scores, a.attn_scores);
    fill(k.softmax_exp, a.softmax_exp);
    fill(k.scale_probs, a.scale_probs);
    fill(k.attn_values, a.attn_values);
    fill(k.gelu_mul, a.gelu_mul);
    return k;
  }();
  return cpu_features().avx512 ? &table : nullptr;
#else
  return nullptr;
#endif
}

namespace {

bool is_quantized(DType t) { return is_block_quantized(t); }

// Each thread gets several row chunks so that uneven progress evens out.
constexpr int kChunksPerThread = 4;
constexpr int64_t kRowAlign = 16;          // chunks start on a row tile boundary (AVX-512: 16 rows)
constexpr int64_t kParallelElems = 1 << 15;  // below this an elementwise op runs on the caller
constexpr int kMaxHeadDim = 1024;
constexpr int kMaxTileTokens = 4;  // tokens of one sequence per attention task
constexpr int kMaxQueries = 32;    // query vectors (tokens x heads of a kv group) per attention task
constexpr int64_t kMinSplitPositions = 256;  // a decode's positions are split in slices no shorter

class CpuBackend final : public Backend {
 public:
  CpuBackend(int threads, const KernelTable& k) : k_(k), pool_(threads) {}

  std::string name() const override { return std::string("cpu-") + k_.isa; }
  int threads() const override { return pool_.size(); }
  void set_cancel_flag(const std::atomic<bool>* flag) override {
    Backend::set_cancel_flag(flag);
    pool_.set_cancel_flag(flag);
  }

  bool host_visible() const override { return true; }
  Buffer alloc(size_t bytes, bool zeroed) override { return Buffer(this, host_alloc(bytes, zeroed), bytes); }
  void upload(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }

  void get_rows(const WeightView& table, const int32_t* ids, int64_t n, float* out) override {
    LaunchScope scope(launch_keys::get_rows(table, n));
    for (int64_t t = 0; t < n; ++t) {
      if (ids[t] < 0 || ids[t] >= table.rows)
        throw std::out_of_range("get_rows: id " + std::to_string(ids[t]) + " outside [0, " +
                                std::to_string(table.rows) + ")");
      dequantize_row(table.type, static_cast<const uint8_t*>(table.data) + ids[t] * table.row_stride,
                     out + t * table.cols, table.cols);
    }
  }

  void matmul(const WeightView& w, const float* x, int64_t n_tokens, float* y) override {
    LaunchScope scope(launch_keys::matmul(w, n_tokens));
    if (n_tokens <= 0 || w.rows <= 0) return;
    const int64_t chunk = row_chunk(w.rows);
    const int64_t n_chunks = (w.rows + chunk - 1) / chunk;
    if (!is_quantized(w.type)) {
      const int64_t scratch = k_.matmul_float_scratch ? k_.matmul_float_scratch(w, n_tokens) : 0;
      if (float_scratch_.size() < static_cast<size_t>(scratch * pool_.size())) float_scratch_.resize(scratch * pool_.size());
      pool_.parallel_for(n_chunks, [&](int64_t c, int thread) {
        k_.matmul_float(w, x, n_tokens, y, w.rows, c * chunk, std::min(w.rows, (c + 1) * chunk),
                        float_scratch_.data() + thread * scratch);
      });
      return;
    }
    if (w.cols % 32 != 0) throw std::invalid_argument("matmul: quantized row length not a multiple of 32");
    const int64_t nb = w.cols / 32;
    const int64_t n_tiles = (n_tokens + cpu::kActTileTokens - 1) / cpu::kActTileTokens * nb;
    if (act_.size() < static_cast<size_t>(n_tiles)) act_.resize(n_tiles);
    cpu::ActTile* xq = act_.data();
    auto quantize = [&](int64_t t, int) {
      k_.quantize_act(w.type, x + t * w.cols, w.cols, xq + (t / cpu::kActTileTokens) * nb,
                      static_cast<int>(t % cpu::kActTileTokens));
    };
    if (n_tokens * w.cols < kParallelElems) {
      for (int64_t t = 0; t < n_tokens; ++t) quantize(t, 0);
    } else {
      pool_.parallel_for(n_tokens, quantize);
    }
    // Fault point "kernel.spin": this matmul's task loop never ends (its row
    // chunks are computed over and over): a kernel stuck in real work that only
    // cancelling the step stops, between two tasks.
    static const faults::FaultPoint spin("kernel.spin");
    int64_t n_tasks = n_chunks;
    if (spin.armed() && faults::disarm_fault("kernel.spin")) n_tasks = std::numeric_limits<int64_t>::max() / 2;
    pool_.parallel_for(n_tasks, [&](int64_t t, int) {
      const int64_t c = t % n_chunks;
      k_.matmul_quant(w, xq, n_tokens, y, w.rows, c * chunk, std::min(w.rows, (c + 1) * chunk));
    });
  }

  bool takes_scaled_format(ScaledFormat) const override { return true; }

  void matmul_scaled(const ScaledWeightView& w, const float* x, int64_t n_tokens, float* y) override {
    LaunchScope scope(launch_keys::matmul_scaled(w, n_tokens));
    check_view(w, "matmul_scaled");
    scaled_product(w, x, n_tokens, y);
  }

  void moe_route(const MoeRouting& r, const float* logits, int64_t n_tokens, const int32_t* token_ids, int32_t* ids,
                 float* weights) override {
    LaunchScope scope(launch_keys::moe_route(r, n_tokens));
    route_tokens(r, logits, n_tokens, token_ids, ids, weights);
  }

  // Expert by expert: its tokens gathered, w1 and w3, the clamped SwiGLU times
  // each token's weight, w2, added into the tokens' rows of y.
  void moe_experts(std::span<const ExpertWeights> experts, float swiglu_limit, const float* x, int64_t n_tokens,
                   int top_k, const int32_t* ids, const float* weights, float* y) override {
    LaunchScope scope(launch_keys::moe_experts(static_cast<int64_t>(experts.size()), top_k, n_tokens));
    check_experts(experts, "moe_experts");
    const int64_t dim = experts[0].w1.cols, inter = experts[0].w1.rows, n_experts = experts.size();
    std::vector<std::vector<int64_t>> slots(n_experts);  // per expert: t * top_k + j of its uses
    for (int64_t i = 0; i < n_tokens * top_k; ++i) {
      if (ids[i] < 0 || ids[i] >= n_experts)
        throw std::out_of_range("moe_experts: token " + std::to_string(i / top_k) + " routed to expert " +
                                std::to_string(ids[i]) + " of " + std::to_string(n_experts));
      slots[ids[i]].push_back(i);
    }
    std::fill(y, y + n_tokens * dim, 0.0f);
    for (int64_t e = 0; e < n_experts; ++e) {
      const int64_t n = static_cast<int64_t>(slots[e].size());
      if (n == 0) continue;
      moe_x_.resize(n * dim), moe_g_.resize(n * inter), moe_u_.resize(n * inter), moe_y_.resize(n * dim);
      for (int64_t i = 0; i < n; ++i)
        std::copy(x + slots[e][i] / top_k * dim, x + (slots[e][i] / top_k + 1) * dim, moe_x_.data() + i * dim);
      scaled_product(experts[e].w1, moe_x_.data(), n, moe_g_.data());
      scaled_product(experts[e].w3, moe_x_.data(), n, moe_u_.data());
      for (int64_t i = 0; i < n; ++i)
        swiglu_limited(moe_g_.data() + i * inter, moe_u_.data() + i * inter, weights[slots[e][i]], swiglu_limit,
                       moe_g_.data() + i * inter, inter);
      scaled_product(experts[e].w2, moe_g_.data(), n, moe_y_.data());
      for (int64_t i = 0; i < n; ++i) k_.add(y + slots[e][i] / top_k * dim, moe_y_.data() + i * dim, dim);
    }
  }

  void rmsnorm(const float* x, const float* weight, float* y, int64_t n_rows, int64_t n, float eps) override {
    LaunchScope scope(launch_keys::rmsnorm(n_rows, n));
    if (n_rows * n < kParallelElems) {
      for (int64_t r = 0; r < n_rows; ++r) k_.rmsnorm_row(x + r * n, weight, y + r * n, n, eps);
      return;
    }
    pool_.parallel_for(n_rows, [&](int64_t r, int) { k_.rmsnorm_row(x + r * n, weight, y + r * n, n, eps); });
  }

  void rope(float* x, const int32_t* pos, int64_t n_tokens, int n_heads, int head_dim,
            const RopeParams& p) override {
    LaunchScope scope(launch_keys::rope(p, n_tokens, n_heads, head_dim));
    if (p.n_rot <= 0 || p.n_rot > head_dim || p.n_rot % 2 != 0 || p.n_rot > kMaxHeadDim)
      throw std::invalid_argument("rope: n_rot must be even and within head_dim");
    const int half = p.n_rot / 2;
    // theta_i = pos * freq_scale * base^(-2i/n_rot), with base^(-2i/n_rot) built by
    // repeated multiplication in float as the reference does.
    const float theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(p.n_rot));
    float cs[kMaxHeadDim / 2], sn[kMaxHeadDim / 2];
    for (int64_t t = 0; t < n_tokens; ++t) {
      float theta = static_cast<float>(pos[t]);
      for (int i = 0; i < half; ++i) {
        const float angle = p.freq_scale * theta;
        cs[i] = std::cos(angle);
        sn[i] = std::sin(angle);
        theta *= theta_scale;
      }
      for (int h = 0; h < n_heads; ++h) {
        float* v = x + (t * n_heads + h) * head_dim;
        for (int i = 0; i < half; ++i) {
          float* a = p.neox ? v + i : v + 2 * i;
          float* b = p.neox ? v + i + half : v + 2 * i + 1;
          const float x0 = *a, x1 = *b;
          *a = x0 * cs[i] - x1 * sn[i];
          *b = x0 * sn[i] + x1 * cs[i];
        }
      }
    }
  }

  void silu_mul(const float* gate, const float* up, float* out, int64_t n) override {
    LaunchScope scope(launch_keys::silu_mul(n));
    elementwise(n, [&](int64_t i0, int64_t i1) { k_.silu_mul(gate + i0, up + i0, out + i0, i1 - i0); });
  }

  void add(float* y, const float* x, int64_t n) override {
    LaunchScope scope(launch_keys::add(n));
    elementwise(n, [&](int64_t i0, int64_t i1) { k_.add(y + i0, x + i0, i1 - i0); });
  }

  bool has_extra_ops() const override { return true; }

  void gelu_mul(const float* gate, const float* up, float* out, int64_t n) override {
    LaunchScope scope(launch_keys::gelu_mul(n));
    elementwise(n, [&](int64_t i0, int64_t i1) { k_.gelu_mul(gate + i0, up + i0, out + i0, i1 - i0); });
  }

  void scale(float* x, float s, int64_t n) override {
    LaunchScope scope(launch_keys::scale(n));
    elementwise(n, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) x[i] *= s;
    });
  }

  void softcap(float* x, float cap, int64_t n) override {
    LaunchScope scope(launch_keys::softcap(n));
    elementwise(n, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) x[i] = cap * std::tanh(x[i] / cap);
    });
  }

  void copy_rows(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t rows,
                 int64_t cols) override {
    LaunchScope scope(launch_keys::copy_rows(rows, cols));
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(dst + r * dst_stride, src + r * src_stride, static_cast<size_t>(cols) * sizeof(float));
  }

  void kv_store(const KvLayerView& kv, const AttnToken* toks, int64_t n_tokens, const float* k,
                const float* v) override {
    LaunchScope scope(launch_keys::kv_store(kv, n_tokens));
    const int64_t row = int64_t(kv.n_kv_heads) * kv.head_dim;
    for (int64_t t = 0; t < n_tokens; ++t) {
      const int32_t pos = toks[t].pos;
      const int64_t slot = int64_t(toks[t].block_table[pos / kv.block_size]) * kv.block_size + pos % kv.block_size;
      if (kv.type == DType::F16) {
        auto* kd = static_cast<uint16_t*>(kv.k) + slot * row;
        auto* vd = static_cast<uint16_t*>(kv.v) + slot * row;
        for (int64_t i = 0; i < row; ++i) {
          kd[i] = fp32_to_fp16(k[t * row + i]);
          vd[i] = fp32_to_fp16(v[t * row + i]);
        }
      } else {
        std::copy(k + t * row, k + (t + 1) * row, static_cast<float*>(kv.k) + slot * row);
        std::copy(v + t * row, v + (t + 1) * row, static_cast<float*>(kv.v) + slot * row);
      }
    }
  }

  void attention(const KvLayerView& kv, const AttnToken* toks, int64_t n_tokens, int64_t reach, const float* q,
                 int n_heads, float scale, float* out) override {
    attention_extra(kv, toks, n_tokens, reach, q, n_heads, scale, {}, out);
  }

  void attention_extra(const KvLayerView& kv, const AttnToken* toks, int64_t n_tokens, int64_t reach, const float* q,
                       int n_heads, float scale, const AttentionExtras& extras, float* out) override {
    LaunchScope scope(launch_keys::attention(kv, n_heads, n_tokens));
    LaunchScope context(launch_keys::attention_context(kv, reach));
    if (n_tokens <= 0) return;
    if (kv.n_kv_heads <= 0 || n_heads % kv.n_kv_heads != 0 || kv.head_dim > kMaxHeadDim)
      throw std::invalid_argument("attention: heads not a multiple of kv heads, or head_dim too large");
    if (!(extras.softcap >= 0) || extras.window < 0)
      throw std::invalid_argument("attention: negative soft cap or sliding window");
    const int hd = kv.head_dim, n_kv = kv.n_kv_heads, group = n_heads / n_kv;

    // The first position a token at `pos` reads: the window's start, else 0.
    auto first_read = [&](int32_t pos) { return extras.window > 0 ? std::max(0, pos + 1 - extras.window) : 0; };
    // A task is a tile of consecutive tokens of one sequence (same block table)
    // times one kv head: its queries (tokens x the group's heads) share every K/V
    // row, and read only the positions some token of the tile has in its window.
    const int tile_tokens = std::clamp(kMaxQueries / group, 1, kMaxTileTokens);
    tiles_.clear();
    for (int64_t t = 0; t < n_tokens; ++t) {
      if (tiles_.empty() || tiles_.back().n == tile_tokens ||
          toks[t].block_table != toks[tiles_.back().first].block_table)
        tiles_.push_back({t, 0, first_read(toks[t].pos), 0});
      tiles_.back().n++;
      tiles_.back().begin = std::min(tiles_.back().begin, first_read(toks[t].pos));
      tiles_.back().end = std::max(tiles_.back().end, toks[t].pos + 1);
    }
    int64_t ld = 0;  // a score row holds its tile's positions [begin, end)
    for (const Tile& tile : tiles_) ld = std::max<int64_t>(ld, tile.end - tile.begin);
    // Few tiles over a long context (decode): split the positions too, so every
    // thread has work. Each slice keeps at least kMinSplitPositions positions.
    const int64_t pairs = static_cast<int64_t>(tiles_.size()) * n_kv;
    int splits = 1;
    if (pool_.size() > 1 && pairs < 4 * pool_.size()) {
      const int64_t want = (4 * pool_.size() + pairs - 1) / pairs;
      splits = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(want, ld / kMinSplitPositions)));
    }
    const int max_q = tile_tokens * group;
    const bool round_probs = kv.type == DType::F16;
    // Query i of a tile is token first + i / group, head kv_head * group + i % group.
    auto out_row = [&](const Tile& tile, int kvh, int i) {
      return out + ((tile.first + i / group) * n_heads + int64_t(kvh) * group + i % group) * hd;
    };
    // The tile's queries, rounded to the cache's precision as the reference does.
    auto gather_q = [&](const Tile& tile, int kvh, float* qg) {
      for (int i = 0; i < tile.n * group; ++i) {
        const float* src = q + ((tile.first + i / group) * n_heads + int64_t(kvh) * group + i % group) * hd;
        for (int d = 0; d < hd; ++d) qg[int64_t(i) * hd + d] = round_probs ? fp16_to_fp32(fp32_to_fp16(src[d])) : src[d];
      }
    };
    // Softmax of each query's causal part of its score row, within the window
    // when there is one, its scores soft-capped first when asked (the rest of the
    // tile's positions is zeroed). row[j] is position tile.begin + j.
    const float cap = extras.softcap;
    auto softmax = [&](const Tile& tile, float* s) {
      for (int i = 0; i < tile.n * group; ++i) {
        float* row = s + i * ld;
        const int32_t pos = toks[tile.first + i / group].pos;
        const int64_t lo = first_read(pos) - tile.begin, n = pos + 1 - tile.begin;
        if (cap > 0)
          for (int64_t j = lo; j < n; ++j) row[j] = cap * std::tanh(row[j] / cap);
        const double sum = k_.softmax_exp(row + lo, n - lo);
        k_.scale_probs(row + lo, n - lo, static_cast<float>(1.0 / sum), round_probs);
        std::fill(row, row + lo, 0.0f);
        std::fill(row + n, row + (tile.end - tile.begin), 0.0f);
      }
    };
    if (qbuf_.size() < static_cast<size_t>(pool_.size() * max_q * hd)) qbuf_.resize(pool_.size() * max_q * hd);

    if (splits == 1) {
      // One task per (tile, kv head) does it all, with its score rows in per-thread scratch.
      if (scores_.size() < static_cast<size_t>(pool_.size() * max_q * ld)) scores_.resize(pool_.size() * max_q * ld);
      if (part_.size() < static_cast<size_t>(pool_.size() * max_q * hd)) part_.resize(pool_.size() * max_q * hd);
      pool_.parallel_for(pairs, [&](int64_t pair, int thread) {
        const Tile& tile = tiles_[pair / n_kv];
        const int kvh = static_cast<int>(pair % n_kv), nq = tile.n * group;
        float* qg = qbuf_.data() + int64_t(thread) * max_q * hd;
        float* s = scores_.data() + int64_t(thread) * max_q * ld;
        gather_q(tile, kvh, qg);
        k_.attn_scores(kv, toks[tile.first].block_table, tile.begin, tile.end, qg, nq, kvh, scale, s, ld);
        softmax(tile, s);
        float* acc = part_.data() + int64_t(thread) * max_q * hd;
        std::fill(acc, acc + int64_t(nq) * hd, 0.0f);
        k_.attn_values(kv, toks[tile.first].block_table, tile.begin, tile.end, s, ld, nq, kvh, acc);
        for (int i = 0; i < nq; ++i) std::copy(acc + int64_t(i) * hd, acc + int64_t(i + 1) * hd, out_row(tile, kvh, i));
      });
      return;
    }

    // Split: scores of every slice of the tile's positions, the softmax of whole
    // rows, then each slice's share of the weighted V sum, added up per query.
    if (scores_.size() < static_cast<size_t>(pairs * max_q * ld)) scores_.resize(pairs * max_q * ld);
    const int64_t acc_floats = int64_t(max_q) * hd;
    if (part_.size() < static_cast<size_t>(pairs * splits * acc_floats)) part_.resize(pairs * splits * acc_floats);
    auto slice = [&](const Tile& tile, int split, int32_t* p0, int32_t* p1) {
      const int64_t span = tile.end - tile.begin;
      *p0 = static_cast<int32_t>(tile.begin + span * split / splits);
      *p1 = static_cast<int32_t>(tile.begin + span * (split + 1) / splits);
    };
    // Where a slice's scores start in its pair's score rows.
    auto slice_scores = [&](int64_t pair, const Tile& tile, int32_t p0) {
      return scores_.data() + pair * max_q * ld + (p0 - tile.begin);
    };
    pool_.parallel_for(pairs * splits, [&](int64_t task, int thread) {
      const int64_t pair = task / splits;
      const Tile& tile = tiles_[pair / n_kv];
      const int kvh = static_cast<int>(pair % n_kv);
      int32_t p0, p1;
      slice(tile, static_cast<int>(task % splits), &p0, &p1);
      float* qg = qbuf_.data() + int64_t(thread) * max_q * hd;
      gather_q(tile, kvh, qg);
      k_.attn_scores(kv, toks[tile.first].block_table, p0, p1, qg, tile.n * group, kvh, scale,
                     slice_scores(pair, tile, p0), ld);
    });
    pool_.parallel_for(pairs, [&](int64_t pair, int) {
      softmax(tiles_[pair / n_kv], scores_.data() + pair * max_q * ld);
    });
    pool_.parallel_for(pairs * splits, [&](int64_t task, int) {
      const int64_t pair = task / splits;
      const Tile& tile = tiles_[pair / n_kv];
      const int kvh = static_cast<int>(pair % n_kv);
      int32_t p0, p1;
      slice(tile, static_cast<int>(task % splits), &p0, &p1);
      float* acc = part_.data() + task * acc_floats;
      std::fill(acc, acc + acc_floats, 0.0f);
      k_.attn_values(kv, toks[tile.first].block_table, p0, p1, slice_scores(pair, tile, p0), ld, tile.n * group, kvh,
                     acc);
    });
    for (int64_t pair = 0; pair < pairs; ++pair) {
      const Tile& tile = tiles_[pair / n_kv];
      const int kvh = static_cast<int>(pair % n_kv);
      for (int i = 0; i < tile.n * group; ++i) {
        float* o = out_row(tile, kvh, i);
        for (int d = 0; d < hd; ++d) {
          float sum = 0;
          for (int sp = 0; sp < splits; ++sp) sum += part_[(pair * splits + sp) * acc_floats + int64_t(i) * hd + d];
          o[d] = sum;
        }
      }
    }
  }

 protected:
  void free(void* data) override { host_free(data); }

 private:
  int64_t row_chunk(int64_t rows) const {
    const int64_t want = std::max<int64_t>(1, int64_t(pool_.size()) * kChunksPerThread);
    int64_t chunk = (rows + want - 1) / want;
    return (chunk + kRowAlign - 1) / kRowAlign * kRowAlign;
  }

  // y = W x of a checked scaled weight, its rows split over the pool.
  void scaled_product(const ScaledWeightView& w, const float* x, int64_t n_tokens, float* y) {
    if (n_tokens <= 0 || w.rows <= 0) return;
    if (w.format == ScaledFormat::Mxfp4) {  // the activations in the nibbles' order, once for all rows
      if (nibble_x_.size() < static_cast<size_t>(n_tokens * w.cols)) nibble_x_.resize(n_tokens * w.cols);
      for (int64_t t = 0; t < n_tokens; ++t)
        cpu::to_nibble_order(x + t * w.cols, w.cols, nibble_x_.data() + t * w.cols);
      x = nibble_x_.data();
    }
    const int64_t chunk = row_chunk(w.rows);
    pool_.parallel_for((w.rows + chunk - 1) / chunk, [&](int64_t c, int) {
      k_.matmul_scaled(w, x, n_tokens, y, w.rows, c * chunk, std::min(w.rows, (c + 1) * chunk));
    });
  }

  template <class Fn>
  void elementwise(int64_t n, Fn&& fn) {
    if (n < kParallelElems || pool_.size() == 1) return fn(0, n);
    const int64_t parts = pool_.size();
    const int64_t chunk = ((n + parts - 1) / parts + 15) / 16 * 16;
    pool_.parallel_for(parts, [&](int64_t p, int) {
      const int64_t i0 = p * chunk, i1 = std::min(n, i0 + chunk);
      if (i0 < i1) fn(i0, i1);
    });
  }

  struct Tile {
    int64_t first;  // first token
    int n;          // tokens
    int32_t begin;  // the first position any of them reads (0 without a window)
    int32_t end;    // one past the last position any of them reads
  };

  const cpu::KernelTable& k_;
  ThreadPool pool_;
  std::vector<cpu::ActTile> act_;
  std::vector<float> part_, qbuf_, scores_;
  std::vector<float> float_scratch_;  // matmul_float's, per thread
  std::vector<float> nibble_x_;       // matmul_scaled's MXFP4 activations
  std::vector<float> moe_x_, moe_g_, moe_u_, moe_y_;  // moe_experts': one expert's tokens
  std::vector<Tile> tiles_;
};

}  // namespace
}  // namespace cpu

namespace {

// INFERD_CPU_ISA, for Auto: forces an instruction set (benchmarks, comparisons).
CpuIsa isa_from_env() {
  const char* e = std::getenv("INFERD_CPU_ISA");
  const std::string v = e ? e : "";
  if (v.empty() || v == "auto") return CpuIsa::Auto;
  if (v == "scalar") return CpuIsa::Scalar;
  if (v == "avx2") return CpuIsa::Avx2;
  if (v == "avx512") return CpuIsa::Avx512;
  throw std::invalid_argument("INFERD_CPU_ISA=" + v + ": expected auto, scalar, avx2 or avx512");
}

}  // namespace

bool cpu_isa_available(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::Avx2: return cpu::avx2_kernels() != nullptr;
    case CpuIsa::Avx512: return cpu::avx512_kernels() != nullptr;
    default: return true;
  }
}

std::unique_ptr<Backend> make_cpu_backend(int threads, CpuIsa isa) {
  if (isa == CpuIsa::Auto) isa = isa_from_env();
  const cpu::KernelTable* k = &cpu::kScalarKernels;
  switch (isa) {
    case CpuIsa::Auto:
      if (const auto* best = cpu::avx512_kernels() ? cpu::avx512_kernels() : cpu::avx2_kernels()) k = best;
      break;
    case CpuIsa::Avx512:
      k = cpu::avx512_kernels();
      if (!k) throw std::invalid_argument("the AVX-512 VNNI CPU kernels are not available on this CPU or build");
      break;
    case CpuIsa::Avx2:
      k = cpu::avx2_kernels();
      if (!k) throw std::invalid_argument("the AVX2 CPU kernels are not available on this CPU or build");
      break;
    case CpuIsa::Scalar: break;
  }
  return std::make_unique<cpu::CpuBackend>(threads, *k);
}

std::unique_ptr<Backend> make_cpu_backend(int threads) { return make_cpu_backend(threads, CpuIsa::Auto); }

}  // namespace inferd::kernels
