#include "engine/models/deepseek_v4.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <stdexcept>

#include "engine/checkpoint_gate.hpp"
#include "engine/json_file.hpp"
#include "engine/models/deepseek_v4_attention.hpp"
#include "engine/models/deepseek_v4_hc.hpp"
#include "engine/safetensors_checkpoint.hpp"
#include "kernels/half.hpp"
#include "kernels/moe.hpp"

namespace inferd::engine {

using kernels::Backend;
using namespace dsv4;

namespace {

DeepseekV4Config read_config(const JsonFile& c) {
  DeepseekV4Config d;
  static_cast<DeepseekV4Dims&>(d) = read_deepseek_v4_dims(c);
  d.rope_dim = c.need_int("qk_rope_head_dim");
  d.index_topk = c.need_int("index_topk");
  d.window = c.need_int("sliding_window");
  d.ratios = c.get_ints("compress_ratios").value_or(std::vector<int64_t>{});
  d.ratios.resize(static_cast<size_t>(d.layers), 0);  // the draft stages' entries are not run here
  d.routed_scale = static_cast<float>(c.get_float("routed_scaling_factor").value_or(1.0));
  d.swiglu_limit = static_cast<float>(c.get_float("swiglu_limit").value_or(0.0));
  d.hc_eps = static_cast<float>(c.get_float("hc_eps").value_or(1e-6));
  d.norm_eps = static_cast<float>(c.get_float("rms_norm_eps").value_or(1e-6));
  d.sinkhorn_iters = static_cast<int>(c.get_int("hc_sinkhorn_iters").value_or(20));
  d.rope_theta = c.get_float("rope_theta").value_or(10000.0);
  d.compress_rope_theta = c.get_float("compress_rope_theta").value_or(160000.0);
  if (d.rope_dim > d.head_dim || d.rope_dim % 2 != 0 || d.rope_dim > d.index_head_dim)
    c.fail("qk_rope_head_dim", "must be even and at most head_dim and index_head_dim");
  if (d.hc_eps <= 0 || d.sinkhorn_iters < 1) c.fail("hc_sinkhorn_iters", "needs at least 1 iteration and hc_eps > 0");
  if (const auto* s = c.find("rope_scaling")) {
    if (!s->is_object()) c.fail("rope_scaling", "not an object");
    const auto& o = s->as_object();
    const auto number = [&](const char* key, double fallback) {
      const auto* v = o.if_contains(key);
      if (!v || v->is_null()) return fallback;
      if (!v->is_number()) c.fail(std::string("rope_scaling.") + key, "not a number");
      return v->to_number<double>();
    };
    const auto* type = o.if_contains("type") ? o.if_contains("type") : o.if_contains("rope_type");
    if (!type || !type->is_string() || type->as_string() != "yarn")
      c.fail("rope_scaling.type", "only \"yarn\" is supported");
    d.yarn_factor = number("factor", 0);
    d.yarn_original_context = number("original_max_position_embeddings", 0);
    d.yarn_beta_fast = number("beta_fast", 32);
    d.yarn_beta_slow = number("beta_slow", 1);
    if (d.yarn_factor <= 0 || d.yarn_original_context <= 0)
      c.fail("rope_scaling", "yarn needs factor and original_max_position_embeddings above 0");
  }
  return d;
}

// A linear layer as stored: FP8 with block scales, or plain BF16/F32.
struct Linear {
  std::optional<kernels::ScaledWeightView> scaled;
  kernels::WeightView plain;
  int64_t rows = 0, cols = 0;

  void apply(Backend& b, const float* x, int64_t n, float* y) const {
    if (scaled) b.matmul_scaled(*scaled, x, n, y);
    else b.matmul(plain, x, n, y);
  }
};

struct Compressor {
  Linear wkv, wgate;
  std::vector<float> ape, norm;  // ape [ratio][coff * dim]
};

struct Layer {
  int64_t ratio = 0;
  std::vector<float> attn_norm, ffn_norm, q_norm, kv_norm, sinks;
  std::vector<float> hc_attn_fn, hc_attn_base, hc_attn_scale, hc_ffn_fn, hc_ffn_base, hc_ffn_scale;
  Linear wq_a, wq_b, wkv, wo_b;
  // Dequantized [o_groups * o_lora][heads * head_dim / o_groups], as the
  // reference holds it (BF16 there; float32 here, 128 MB a layer at V4-Flash's size).
  std::vector<float> wo_a;
  TailRope rope, index_rope;
  std::optional<Compressor> compressor, index_compressor;
  Linear index_wq_b, index_weights;
  // Feed-forward.
  Linear gate;
  std::vector<float> gate_bias;
  std::vector<int64_t> tid2eid;
  std::vector<kernels::ExpertWeights> experts;
  Linear shared_w1, shared_w2, shared_w3;
};

// Per-row RMS normalization without a weight (the query heads).
void rms_normalize(float* x, int64_t n, float eps) {
  double sq = 0;
  for (int64_t i = 0; i < n; ++i) sq += double(x[i]) * x[i];
  const float r = 1.0f / std::sqrt(float(sq / double(n)) + eps);
  for (int64_t i = 0; i < n; ++i) x[i] *= r;
}

// One sequence's rows of a call: rows row .. row + n - 1 of the batch, fed
// at positions state->position on.
struct Run {
  DeepseekV4State* state = nullptr;
  int64_t row = 0, n = 0;
};

}  // namespace

struct DeepseekV4::Impl {
  DeepseekV4Config c;
  Backend* backend = nullptr;
  SafetensorsCheckpoint ckpt;
  std::string dir;
  Linear embed, head;
  std::vector<float> norm, hc_head_fn, hc_head_base, hc_head_scale;
  std::vector<Layer> layers;

  const SafetensorsTensor& tensor(const std::string& name) const {
    const auto found = ckpt.find(name);
    if (!found.tensor) throw LoadError(dir, 0, "tensor " + name + " is missing");
    return *found.tensor;
  }
  bool has(const std::string& name) const { return ckpt.find(name).tensor != nullptr; }

  // A BF16 or F32 tensor as float32 (copied: small, and safetensors data need not be aligned).
  std::vector<float> floats(const std::string& name) const {
    const auto& t = tensor(name);
    std::vector<float> out(static_cast<size_t>(t.elements()));
    const auto* p = static_cast<const uint8_t*>(t.data);
    if (t.dtype == "F32") {
      std::memcpy(out.data(), p, out.size() * 4);
    } else if (t.dtype == "BF16") {
      for (size_t i = 0; i < out.size(); ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = kernels::bf16_to_fp32(h);
      }
    } else {
      throw LoadError(dir, t.offset, "tensor " + name + " is " + t.dtype + ", expected BF16 or F32");
    }
    return out;
  }

  kernels::ScaledWeightView scaled_view(const std::string& name, kernels::ScaledFormat format) const {
    const auto& w = tensor(name + ".weight");
    const auto& s = tensor(name + ".scale");
    kernels::ScaledWeightView v;
    v.format = format;
    v.scale_type = s.dtype == "F32" ? kernels::ScaleType::F32 : kernels::ScaleType::E8M0;
    v.data = w.data;
    v.scales = s.data;
    v.rows = w.shape.at(0);
    v.cols = format == kernels::ScaledFormat::Mxfp4 ? w.shape.at(1) * 2 : w.shape.at(1);
    kernels::check_view(v, name.c_str());
    return v;
  }

  Linear linear(const std::string& name) const {
    Linear l;
    if (has(name + ".scale")) {
      l.scaled = scaled_view(name, kernels::ScaledFormat::Fp8Block);
      l.rows = l.scaled->rows, l.cols = l.scaled->cols;
      return l;
    }
    const auto& w = tensor(name + ".weight");
    if (w.dtype != "BF16" && w.dtype != "F32")
      throw LoadError(dir, w.offset, "tensor " + name + ".weight is " + w.dtype + " without a .scale");
    l.rows = w.shape.at(0), l.cols = w.shape.at(1);
    l.plain = {w.dtype == "BF16" ? kernels::DType::BF16 : kernels::DType::F32, w.data, l.rows, l.cols,
               static_cast<size_t>(l.cols) * (w.dtype == "BF16" ? 2 : 4)};
    return l;
  }

  Compressor compressor(const std::string& p) const {
    return {linear(p + "wkv"), linear(p + "wgate"), floats(p + "ape"), floats(p + "norm.weight")};
  }

  Layer layer(int64_t index) const {
    const std::string p = "layers." + std::to_string(index) + ".";
    Layer l;
    l.ratio = c.ratios[static_cast<size_t>(index)];
    l.attn_norm = floats(p + "attn_norm.weight");
    l.ffn_norm = floats(p + "ffn_norm.weight");
    l.hc_attn_fn = floats(p + "hc_attn_fn"), l.hc_attn_base = floats(p + "hc_attn_base");
    l.hc_attn_scale = floats(p + "hc_attn_scale");
    l.hc_ffn_fn = floats(p + "hc_ffn_fn"), l.hc_ffn_base = floats(p + "hc_ffn_base");
    l.hc_ffn_scale = floats(p + "hc_ffn_scale");
    l.sinks = floats(p + "attn.attn_sink");
    l.q_norm = floats(p + "attn.q_norm.weight");
    l.kv_norm = floats(p + "attn.kv_norm.weight");
    l.wq_a = linear(p + "attn.wq_a");
    l.wq_b = linear(p + "attn.wq_b");
    l.wkv = linear(p + "attn.wkv");
    l.wo_b = linear(p + "attn.wo_b");
    const Linear wo_a = linear(p + "attn.wo_a");
    l.wo_a.resize(static_cast<size_t>(wo_a.rows * wo_a.cols));
    if (wo_a.scaled) kernels::dequantize(*wo_a.scaled, l.wo_a.data());
    else l.wo_a = floats(p + "attn.wo_a.weight");
    // Window-only layers: rope_theta as it is; compressed layers: compress_rope_theta with YaRN.
    const TailRope::Yarn none{}, yarn{float(c.yarn_factor), c.yarn_original_context, c.yarn_beta_fast, c.yarn_beta_slow};
    const double theta = l.ratio ? c.compress_rope_theta : c.rope_theta;
    l.rope = TailRope::make(int(c.head_dim), int(c.rope_dim), theta, l.ratio ? yarn : none);
    l.index_rope = TailRope::make(int(c.index_head_dim), int(c.rope_dim), theta, l.ratio ? yarn : none);
    if (l.ratio) l.compressor = compressor(p + "attn.compressor.");
    if (l.ratio == 4) {
      l.index_compressor = compressor(p + "attn.indexer.compressor.");
      l.index_wq_b = linear(p + "attn.indexer.wq_b");
      l.index_weights = linear(p + "attn.indexer.weights_proj");
    }
    l.gate = linear(p + "ffn.gate");
    if (index < c.hash_layers) {
      const auto& t = tensor(p + "ffn.gate.tid2eid");
      l.tid2eid.resize(static_cast<size_t>(t.elements()));
      std::memcpy(l.tid2eid.data(), t.data, l.tid2eid.size() * 8);
    } else {
      l.gate_bias = floats(p + "ffn.gate.bias");
    }
    for (int64_t e = 0; e < c.experts; ++e) {
      const std::string x = p + "ffn.experts." + std::to_string(e) + ".";
      const auto format = tensor(x + "w1.weight").dtype == "I8" ? kernels::ScaledFormat::Mxfp4
                                                                : kernels::ScaledFormat::Fp8Block;
      if (!has(x + "w1.scale"))
        throw LoadError(dir, 0, "tensor " + x + "w1 has no .scale: unquantized experts are not supported");
      l.experts.push_back({scaled_view(x + "w1", format), scaled_view(x + "w2", format), scaled_view(x + "w3", format)});
    }
    kernels::check_experts(l.experts, (p + "ffn.experts").c_str());
    l.shared_w1 = linear(p + "ffn.shared_experts.w1");
    l.shared_w2 = linear(p + "ffn.shared_experts.w2");
    l.shared_w3 = linear(p + "ffn.shared_experts.w3");
    return l;
  }

  HcShape hc_shape() const { return {int(c.hc), c.hidden, c.sinkhorn_iters, c.hc_eps, c.norm_eps}; }

  // A compressor's projections of rows x [n][hidden] at positions pos[t]: kv
  // and score [n][width], the score plus ape of the row's position.
  struct Projection {
    std::vector<float> kv, score;
    int64_t width = 0;
  };
  Projection project(const Compressor& k, int64_t ratio, const float* x, std::span<const int64_t> pos) const {
    const int64_t n = int64_t(pos.size()), width = k.wkv.rows;
    Projection p{std::vector<float>(n * width), std::vector<float>(n * width), width};
    k.wkv.apply(*backend, x, n, p.kv.data());
    k.wgate.apply(*backend, x, n, p.score.data());
    for (int64_t t = 0; t < n; ++t)
      for (int64_t i = 0; i < width; ++i) p.score[t * width + i] += k.ape[(pos[t] % ratio) * width + i];
    return p;
  }

  // Appends a run's rows of `p` to its compressor's state and pools the
  // windows they close into st.entries, normed and rotated at their windows'
  // first positions.
  void pool(const Layer& l, const Compressor& k, const TailRope& rope, const Projection& p, const Run& run,
            DeepseekV4State::Compressor& st) const {
    const int r = int(l.ratio), dim = rope.head_dim;
    const auto rows = [&](const std::vector<float>& v) { return v.begin() + run.row * p.width; };
    st.kv.insert(st.kv.end(), rows(p.kv), rows(p.kv) + run.n * p.width);
    st.score.insert(st.score.end(), rows(p.score), rows(p.score) + run.n * p.width);
    CompressorInput in{r, dim, st.pooled, int64_t(st.kv.size()) / p.width, st.kv.data(), st.score.data()};
    std::vector<float> entries = pool_windows(in);
    const int64_t m = int64_t(entries.size()) / dim;
    if (m == 0) return;
    backend->rmsnorm(entries.data(), k.norm.data(), entries.data(), m, dim, c.norm_eps);
    for (int64_t i = 0; i < m; ++i) rope.apply(entries.data() + i * dim, 1, (in.first_window + i) * r);
    st.append(entries.data(), m, r, dim);
    // Keep the rows the next window still reads.
    const int64_t drop = (in.window_start(in.first_window + m) - in.window_start(in.first_window)) * p.width;
    st.kv.erase(st.kv.begin(), st.kv.begin() + drop);
    st.score.erase(st.score.begin(), st.score.begin() + drop);
  }

  // The lightning indexer's picks [n][index_topk] of ratio-4 layer `index`'s
  // compressed entries for the rows x [n][hidden] of `runs`.
  std::vector<int32_t> pick(const Layer& l, int64_t index, const float* x, const float* qr,
                            std::span<const int64_t> pos, std::span<const Run> runs) const {
    const int64_t n = int64_t(pos.size()), hi = c.index_heads, di = c.index_head_dim, k = c.index_topk;
    const Projection keys = project(*l.index_compressor, l.ratio, x, pos);
    std::vector<float> q(n * hi * di), w(n * hi);
    l.index_wq_b.apply(*backend, qr, n, q.data());
    l.index_weights.apply(*backend, x, n, w.data());
    const float w_scale = 1.0f / std::sqrt(float(hi));
    for (float& v : w) v *= w_scale;
    std::vector<int32_t> picks(n * k);
    for (const Run& run : runs) {
      DeepseekV4State::Compressor& st = run.state->layers[size_t(index)].index;
      pool(l, *l.index_compressor, l.index_rope, keys, run, st);
      std::vector<const float*> rows(static_cast<size_t>(st.pooled));
      for (int64_t j = 0; j < st.pooled; ++j) rows[size_t(j)] = st.entry(j, l.ratio, di);
      for (int64_t t = run.row; t < run.row + run.n; ++t) {
        l.index_rope.apply(q.data() + t * hi * di, int(hi), pos[t]);
        index_topk({int(hi), int(di), q.data() + t * hi * di, w.data() + t * hi}, rows, pos[t], int(l.ratio), int(k),
                   picks.data() + t * k);
      }
    }
    return picks;
  }

  // One run's attention over its window, its picked or all compressed entries:
  // q [n][heads][head_dim] and its keys `fresh` [n][head_dim] -> o, st's window advanced.
  void attend(const Layer& l, const Run& run, const float* q, const float* fresh, const int32_t* picks,
              DeepseekV4State::Layer& st, float* o) const {
    const int64_t h = c.heads, d = c.head_dim, pos = run.state->position;
    // The keys of the window's earlier positions, then these positions'.
    const int64_t held = int64_t(st.window.size()) / d, first = pos - held;
    std::vector<float> kv(st.window);
    kv.insert(kv.end(), fresh, fresh + run.n * d);
    auto entry = [&](int64_t j) -> const float* { return st.compressor.entry(j, l.ratio, d); };
    std::vector<const float*> keys;
    const float scale = 1.0f / std::sqrt(float(d));
    for (int64_t t = 0; t < run.n; ++t) {
      const int64_t p = pos + t;
      keys.clear();
      for (int64_t s = std::max(first, p - c.window + 1); s <= p; ++s) keys.push_back(kv.data() + (s - first) * d);
      if (l.ratio == 4) {
        for (int64_t i = 0; i < c.index_topk; ++i)
          if (const int32_t j = picks[t * c.index_topk + i]; j >= 0) keys.push_back(entry(j));
      } else if (l.ratio) {
        for (int64_t j = 0; j < (p + 1) / l.ratio; ++j) keys.push_back(entry(j));
      }
      float* ot = o + t * h * d;
      sink_attention(q + t * h * d, int(h), int(d), keys, l.sinks.data(), scale, ot);
      l.rope.apply(ot, int(h), p, /*inverse=*/true);  // back to the query's frame: relative positions only
    }
    // The next position reads the window - 1 before it.
    const int64_t keep = std::min(held + run.n, c.window - 1);
    st.window.assign(kv.end() - keep * d, kv.end());
  }

  // The attention of layer `index` over the rows x [n][hidden] (normed) of
  // `runs` at positions pos -> out [n][hidden], the runs' states advanced.
  void attention(const Layer& l, int64_t index, const float* x, std::span<const int64_t> pos,
                 std::span<const Run> runs, float* out) const {
    Backend& b = *backend;
    const int64_t n = int64_t(pos.size()), h = c.heads, d = c.head_dim;
    std::vector<float> qa(n * c.q_lora), qr(n * c.q_lora), q(n * h * d), kv0(n * d), kv(n * d);
    l.wq_a.apply(b, x, n, qa.data());
    b.rmsnorm(qa.data(), l.q_norm.data(), qr.data(), n, c.q_lora, c.norm_eps);
    l.wq_b.apply(b, qr.data(), n, q.data());
    l.wkv.apply(b, x, n, kv0.data());
    b.rmsnorm(kv0.data(), l.kv_norm.data(), kv.data(), n, d, c.norm_eps);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t i = 0; i < h; ++i) rms_normalize(q.data() + (t * h + i) * d, d, c.norm_eps);
      l.rope.apply(q.data() + t * h * d, int(h), pos[t]);
      l.rope.apply(kv.data() + t * d, 1, pos[t]);
    }
    Projection compressed;
    std::vector<int32_t> picks;
    if (l.ratio) compressed = project(*l.compressor, l.ratio, x, pos);
    if (l.ratio == 4) picks = pick(l, index, x, qr.data(), pos, runs);

    std::vector<float> o(n * h * d);
    for (const Run& run : runs) {
      DeepseekV4State::Layer& st = run.state->layers[size_t(index)];
      if (l.ratio) pool(l, *l.compressor, l.rope, compressed, run, st.compressor);
      attend(l, run, q.data() + run.row * h * d, kv.data() + run.row * d,
             picks.empty() ? nullptr : picks.data() + run.row * c.index_topk, st, o.data() + run.row * h * d);
    }

    // Grouped output: each group of heads through its own block of wo_a, then wo_b over all groups.
    const int64_t g = c.o_groups, gw = h * d / g, ol = c.o_lora;
    std::vector<float> part(n * gw), zg(n * ol), z(n * g * ol);
    for (int64_t i = 0; i < g; ++i) {
      for (int64_t t = 0; t < n; ++t) std::copy_n(o.data() + t * h * d + i * gw, gw, part.data() + t * gw);
      const kernels::WeightView w{kernels::DType::F32, l.wo_a.data() + i * ol * gw, ol, gw,
                                  static_cast<size_t>(gw) * 4};
      b.matmul(w, part.data(), n, zg.data());
      for (int64_t t = 0; t < n; ++t) std::copy_n(zg.data() + t * ol, ol, z.data() + t * g * ol + i * ol);
    }
    l.wo_b.apply(b, z.data(), n, out);
  }

  // The mixture of experts plus the shared expert: x [n][hidden] normed -> out.
  void moe(const Layer& l, int64_t index, const float* x, std::span<const int32_t> tokens, float* out) const {
    Backend& b = *backend;
    const int64_t n = static_cast<int64_t>(tokens.size()), k = c.experts_per_tok, inter = l.shared_w1.rows;
    std::vector<float> logits(n * c.experts), weights(n * k);
    std::vector<int32_t> ids(n * k);
    l.gate.apply(b, x, n, logits.data());
    kernels::MoeRouting r{int(c.experts), int(k), c.routed_scale, nullptr, nullptr, 0};
    if (index < c.hash_layers) r.tid2eid = l.tid2eid.data(), r.vocab = c.vocab;
    else r.bias = l.gate_bias.data();
    b.moe_route(r, logits.data(), n, tokens.data(), ids.data(), weights.data());
    b.moe_experts(l.experts, c.swiglu_limit, x, n, int(k), ids.data(), weights.data(), out);
    // The shared expert is clamped like the routed ones.
    std::vector<float> gate(n * inter), up(n * inter), act(n * inter), shared(n * c.hidden);
    l.shared_w1.apply(b, x, n, gate.data());
    l.shared_w3.apply(b, x, n, up.data());
    kernels::swiglu_limited(gate.data(), up.data(), 1.0f, c.swiglu_limit, act.data(), n * inter);
    l.shared_w2.apply(b, act.data(), n, shared.data());
    b.add(out, shared.data(), n * c.hidden);
  }

  // One hyper-connected step over all tokens: collapse the streams, norm, run `f`, expand back.
  template <class F>
  void hc_step(const float* fn, const float* base, const float* scale, const std::vector<float>& norm_weight,
               std::vector<float>& streams, int64_t n, F&& f) const {
    const HcShape s = hc_shape();
    const HcMixer m{fn, base, scale};
    const int64_t width = c.hc * c.hidden;
    std::vector<float> x(n * c.hidden), xn(n * c.hidden), y(n * c.hidden);
    std::vector<HcWeights> w(n);
    for (int64_t t = 0; t < n; ++t) w[t] = hc_pre(s, m, streams.data() + t * width, x.data() + t * c.hidden);
    backend->rmsnorm(x.data(), norm_weight.data(), xn.data(), n, c.hidden, c.norm_eps);
    f(xn.data(), y.data());
    for (int64_t t = 0; t < n; ++t) hc_post(s, w[t], y.data() + t * c.hidden, streams.data() + t * width);
  }
};

float* DeepseekV4State::Compressor::entry(int64_t j, int64_t ratio, int64_t dim) {
  if (!pages.base) return entries.data() + j * dim;
  const int64_t p = j * ratio, block = p / pages.block_size;
  if (block >= int64_t(pages.table.size()))
    throw std::out_of_range("deepseek_v4: entry " + std::to_string(j) + " lies past the sequence's " +
                            std::to_string(pages.table.size()) + " blocks");
  return pages.base + pages.table[size_t(block)] * pages.block_stride + (p % pages.block_size) / ratio * dim;
}

void DeepseekV4State::Compressor::append(const float* rows, int64_t m, int64_t ratio, int64_t dim) {
  if (!pages.base) entries.insert(entries.end(), rows, rows + m * dim);
  else
    for (int64_t i = 0; i < m; ++i) std::copy_n(rows + i * dim, dim, entry(pooled + i, ratio, dim));
  pooled += m;
}

DeepseekV4::DeepseekV4(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DeepseekV4::~DeepseekV4() = default;

const DeepseekV4Config& DeepseekV4::config() const { return impl_->c; }

std::unique_ptr<DeepseekV4> DeepseekV4::load(const std::string& dir, Backend& backend) {
  if (!backend.host_visible() || !backend.takes_scaled_format(kernels::ScaledFormat::Fp8Block) ||
      !backend.takes_scaled_format(kernels::ScaledFormat::Mxfp4))
    throw std::invalid_argument("deepseek_v4: the forward pass runs on the CPU backend only, not on " +
                                backend.name());
  const GateResult gate = check_checkpoint(dir);
  if (!gate.passed()) throw LoadError(dir, 0, "checkpoint gate: " + gate.problems.front());
  auto m = std::make_unique<Impl>();
  m->dir = dir;
  m->backend = &backend;
  m->c = read_config(*read_json(dir + "/config.json", true));
  m->ckpt = SafetensorsCheckpoint::open(dir);
  m->embed = m->linear("embed");
  m->head = m->linear("head");
  m->norm = m->floats("norm.weight");
  m->hc_head_fn = m->floats("hc_head_fn");
  m->hc_head_base = m->floats("hc_head_base");
  m->hc_head_scale = m->floats("hc_head_scale");
  for (int64_t l = 0; l < m->c.layers; ++l) m->layers.push_back(m->layer(l));
  return std::unique_ptr<DeepseekV4>(new DeepseekV4(std::move(m)));
}

std::vector<float> DeepseekV4::prefill(std::span<const int32_t> tokens,
                                       std::vector<std::vector<float>>* layer_streams) const {
  DeepseekV4State state;
  return forward(state, tokens, layer_streams);
}

std::vector<float> DeepseekV4::forward(DeepseekV4State& state, std::span<const int32_t> tokens,
                                       std::vector<std::vector<float>>* layer_streams) const {
  const DeepseekV4Feed feed{&state, tokens};
  return forward(std::span(&feed, 1), layer_streams);
}

std::vector<float> DeepseekV4::forward(std::span<const DeepseekV4Feed> feeds,
                                       std::vector<std::vector<float>>* layer_streams,
                                       const std::vector<int32_t>* rows) const {
  const Impl& m = *impl_;
  const DeepseekV4Config& c = m.c;
  Backend& b = *m.backend;
  if (m.embed.scaled) throw std::invalid_argument("deepseek_v4: a block-quantized embedding is not supported");
  // Everything is checked before any state changes.
  std::vector<Run> runs;
  std::vector<int32_t> tokens;
  std::vector<int64_t> pos;
  for (const DeepseekV4Feed& f : feeds) {
    if (!f.state) throw std::invalid_argument("deepseek_v4: a feed without a state");
    const DeepseekV4State& s = *f.state;
    if (!s.layers.empty() && s.layers.size() != static_cast<size_t>(c.layers))
      throw std::invalid_argument("deepseek_v4: a state of " + std::to_string(s.layers.size()) +
                                  " layers for a model of " + std::to_string(c.layers));
    if (s.layers.empty() && s.position != 0)
      throw std::invalid_argument("deepseek_v4: a state at position " + std::to_string(s.position) +
                                  " without its layers");
    for (const Run& r : runs)
      if (r.state == f.state) throw std::invalid_argument("deepseek_v4: the same state fed twice in one call");
    for (int32_t t : f.tokens)
      if (t < 0 || t >= c.vocab)
        throw std::invalid_argument("deepseek_v4: token " + std::to_string(t) + " outside the vocabulary of " +
                                    std::to_string(c.vocab));
    runs.push_back({f.state, int64_t(tokens.size()), int64_t(f.tokens.size())});
    tokens.insert(tokens.end(), f.tokens.begin(), f.tokens.end());
    for (int64_t i = 0; i < int64_t(f.tokens.size()); ++i) pos.push_back(s.position + i);
  }
  const int64_t n = static_cast<int64_t>(tokens.size()), width = c.hc * c.hidden;
  if (rows)
    for (int32_t r : *rows)
      if (r < 0 || r >= n)
        throw std::invalid_argument("deepseek_v4: logits row " + std::to_string(r) + " of a call of " +
                                    std::to_string(n) + " tokens");
  if (n == 0) return {};
  for (const Run& r : runs) r.state->layers.resize(static_cast<size_t>(c.layers));

  // The embedding, repeated into every stream (no scaling).
  std::vector<float> x(n * c.hidden), streams(n * width);
  b.get_rows(m.embed.plain, tokens.data(), n, x.data());
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < c.hc; ++j) std::copy_n(x.data() + t * c.hidden, c.hidden, streams.data() + t * width + j * c.hidden);

  if (layer_streams) layer_streams->clear();
  for (int64_t i = 0; i < c.layers; ++i) {
    const Layer& l = m.layers[static_cast<size_t>(i)];
    m.hc_step(l.hc_attn_fn.data(), l.hc_attn_base.data(), l.hc_attn_scale.data(), l.attn_norm, streams, n,
              [&](const float* in, float* out) { m.attention(l, i, in, pos, runs, out); });
    m.hc_step(l.hc_ffn_fn.data(), l.hc_ffn_base.data(), l.hc_ffn_scale.data(), l.ffn_norm, streams, n,
              [&](const float* in, float* out) { m.moe(l, i, in, tokens, out); });
    if (layer_streams) layer_streams->push_back(streams);
  }

  // The head runs only where logits are wanted (a prompt's last row, not its others).
  std::vector<int64_t> out_rows;
  if (rows) out_rows.assign(rows->begin(), rows->end());
  else for (int64_t t = 0; t < n; ++t) out_rows.push_back(t);
  const auto h = static_cast<int64_t>(out_rows.size());
  const HcMixer head_mixer{m.hc_head_fn.data(), m.hc_head_base.data(), m.hc_head_scale.data()};
  std::vector<float> xn(h * c.hidden), logits(h * c.vocab);
  for (int64_t i = 0; i < h; ++i)
    hc_head(m.hc_shape(), head_mixer, streams.data() + out_rows[i] * width, x.data() + i * c.hidden);
  if (h > 0) {
    b.rmsnorm(x.data(), m.norm.data(), xn.data(), h, c.hidden, c.norm_eps);
    m.head.apply(b, xn.data(), h, logits.data());
  }
  for (const Run& r : runs) r.state->position += r.n;
  return logits;
}

}  // namespace inferd::engine
