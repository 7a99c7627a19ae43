// The Llama architecture (SmolLM2, Llama 2/3, Mistral): pre-norm decoder blocks
// with grouped-query attention, RoPE, RMSNorm and a SwiGLU feed-forward.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/gguf_reader.hpp"
#include "engine/kv/kv_cache.hpp"
#include "engine/models/model_registry.hpp"
#include "engine/models/step_inputs.hpp"
#include "kernels/quantize.hpp"

namespace inferd::engine {
namespace {

using kernels::WeightView;

struct LlamaLayer {
  const float* attn_norm;
  WeightView wq, wk, wv, wo;
  const float* ffn_norm;
  WeightView w_gate, w_up, w_down;
};

class LlamaModel final : public Model {
 public:
  LlamaModel(const GgufFile& f, kernels::Backend& be, Precision precision, WeightLoader& w)
      : be_(be), precision_(precision) {
    read_config(f);
    load_weights(f, w);
  }

  const ModelConfig& config() const override { return cfg_; }

  void forward(const StepBatch& b, KvCache& kv, float* logits) override {
    const int64_t T = static_cast<int64_t>(b.size());
    if (T == 0) return;
    const int D = cfg_.dim, H = cfg_.n_heads, Hkv = cfg_.n_kv_heads, hd = cfg_.head_dim;
    const int64_t R = static_cast<int64_t>(b.logits_rows.size());
    const StepInputs in = staging_.stage(be_, b);
    float* x = x_.reserve(be_, T * D);
    float* h = h_.reserve(be_, T * D);
    float* q = q_.reserve(be_, std::max<int64_t>(T * H * hd, R * D));
    float* k = k_.reserve(be_, T * Hkv * hd);
    float* v = v_.reserve(be_, T * Hkv * hd);
    float* att = att_.reserve(be_, T * H * hd);
    float* gate = gate_.reserve(be_, T * cfg_.ffn_dim);
    float* up = up_.reserve(be_, T * cfg_.ffn_dim);
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    const int64_t reach = *std::max_element(b.positions.begin(), b.positions.end()) + int64_t{1};

    be_.get_rows(tok_embd_, in.tokens, T, x);
    for (int l = 0; l < cfg_.n_layers; ++l) {
      const LlamaLayer& L = layers_[l];
      const auto kvl = kv.layer(l);
      be_.rmsnorm(x, L.attn_norm, h, T, D, cfg_.norm_eps);
      be_.matmul(L.wq, h, T, q);
      be_.matmul(L.wk, h, T, k);
      be_.matmul(L.wv, h, T, v);
      be_.rope(q, in.positions, T, H, hd, cfg_.rope);
      be_.rope(k, in.positions, T, Hkv, hd, cfg_.rope);
      be_.kv_store(kvl, in.attn, T, k, v);
      be_.attention(kvl, in.attn, T, reach, q, H, scale, att);
      be_.matmul(L.wo, att, T, h);
      be_.add(x, h, T * D);

      be_.rmsnorm(x, L.ffn_norm, h, T, D, cfg_.norm_eps);
      be_.matmul(L.w_gate, h, T, gate);
      be_.matmul(L.w_up, h, T, up);
      be_.silu_mul(gate, up, gate, T * cfg_.ffn_dim);
      be_.matmul(L.w_down, gate, T, h);
      be_.add(x, h, T * D);
    }

    // Only the rows whose logits are wanted go through the final norm and the head.
    if (R == 0) return;
    const kernels::WeightView rows{kernels::DType::F32, x, T, D, D * sizeof(float)};
    be_.get_rows(rows, in.logits_rows, R, h);
    be_.rmsnorm(h, out_norm_, q, R, D, cfg_.norm_eps);
    const size_t n_logits = static_cast<size_t>(R) * cfg_.vocab;
    if (be_.host_visible()) {
      be_.matmul(output_, q, R, logits);
    } else {
      float* dev = logits_.reserve(be_, n_logits);
      be_.matmul(output_, q, R, dev);
      be_.download(logits, dev, n_logits * sizeof(float));
    }
  }

 private:
  void read_config(const GgufFile& f) {
    const std::string a = f.get_string("general.architecture").value_or("llama");
    auto need_int = [&](const std::string& key) -> int {
      auto v = f.get_int(a + "." + key);
      if (!v || *v <= 0) throw LoadError(f.path(), 0, "missing or invalid " + a + "." + key);
      return static_cast<int>(*v);
    };
    cfg_.architecture = a;
    cfg_.name = f.get_string("general.name").value_or("");
    cfg_.n_layers = need_int("block_count");
    cfg_.dim = need_int("embedding_length");
    cfg_.n_heads = need_int("attention.head_count");
    cfg_.n_kv_heads = static_cast<int>(f.get_int(a + ".attention.head_count_kv").value_or(cfg_.n_heads));
    cfg_.ffn_dim = need_int("feed_forward_length");
    cfg_.max_context = need_int("context_length");
    if (cfg_.dim % cfg_.n_heads != 0 || cfg_.n_kv_heads <= 0 || cfg_.n_heads % cfg_.n_kv_heads != 0)
      throw LoadError(f.path(), 0, "inconsistent head counts");
    cfg_.head_dim = cfg_.dim / cfg_.n_heads;
    cfg_.norm_eps = static_cast<float>(f.get_float(a + ".attention.layer_norm_rms_epsilon").value_or(1e-5));
    cfg_.rope.n_rot = static_cast<int>(f.get_int(a + ".rope.dimension_count").value_or(cfg_.head_dim));
    cfg_.rope.freq_base = static_cast<float>(f.get_float(a + ".rope.freq_base").value_or(10000.0));
    cfg_.rope.neox = false;  // GGUF llama stores Q/K permuted for adjacent-pair rotation
    const std::string scaling = f.get_string(a + ".rope.scaling.type").value_or("none");
    if (scaling == "linear") {
      cfg_.rope.freq_scale = 1.0f / static_cast<float>(f.get_float(a + ".rope.scaling.factor").value_or(1.0));
    } else if (scaling != "none") {
      throw LoadError(f.path(), 0, "unsupported rope scaling '" + scaling + "'");
    }
    if (cfg_.rope.n_rot > cfg_.head_dim || cfg_.rope.n_rot % 2 != 0)
      throw LoadError(f.path(), 0, "invalid rope.dimension_count");
  }

  // Reported done once it is ready to run: converted (Exact) or faulted in (Fast).
  WeightView view(WeightLoader& w, const GgufTensorInfo& t) {
    WeightView v{t.type, t.data, t.rows(), t.cols(), kernels::row_bytes(t.type, t.cols())};
    if (precision_ == Precision::Exact && t.type != kernels::DType::F32) {
      // The reference path: one F32 copy, dequantized once at load.
      auto& buf = owned_.emplace_back(std::make_unique<float[]>(static_cast<size_t>(t.rows() * t.cols())));
      for (int64_t r = 0; r < t.rows(); ++r)
        kernels::dequantize_row(t.type, static_cast<const uint8_t*>(t.data) + r * v.row_stride,
                                buf.get() + r * t.cols(), t.cols());
      v = WeightView{kernels::DType::F32, buf.get(), t.rows(), t.cols(), t.cols() * sizeof(float)};
    }
    w.take(t);
    v.data = resident(v.data, static_cast<size_t>(v.rows) * v.row_stride);
    return v;
  }

  // Weights stay where they are on a host-visible backend (the file's mapping);
  // otherwise they are copied into the backend's memory once, at load.
  const void* resident(const void* host, size_t bytes) {
    if (be_.host_visible()) return host;
    auto& buf = resident_.emplace_back(be_.alloc(bytes));
    be_.upload(buf.data(), host, bytes);
    return buf.data();
  }

  const float* f32(const GgufFile& f, WeightLoader& w, const std::string& name, int64_t n) {
    const auto& t = f.tensor(name, {n});
    if (t.type != kernels::DType::F32) throw LoadError(f.path(), t.offset, name + ": expected F32");
    return static_cast<const float*>(resident(w.take(t).data, static_cast<size_t>(n) * sizeof(float)));
  }

  void load_weights(const GgufFile& f, WeightLoader& w) {
    const int64_t D = cfg_.dim, Dkv = int64_t(cfg_.n_kv_heads) * cfg_.head_dim, F = cfg_.ffn_dim;
    const auto& emb = f.tensor("token_embd.weight");
    if (emb.dims.size() != 2 || emb.dims[0] != D) throw LoadError(f.path(), emb.offset, "token_embd.weight: bad shape");
    cfg_.vocab = static_cast<int>(emb.dims[1]);
    tok_embd_ = view(w, emb);
    out_norm_ = f32(f, w, "output_norm.weight", D);
    if (f.find_tensor("output.weight")) {
      output_ = view(w, f.tensor("output.weight", {D, cfg_.vocab}));
    } else {
      output_ = tok_embd_;
      cfg_.tied_embeddings = true;
    }
    for (int l = 0; l < cfg_.n_layers; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      LlamaLayer L;
      L.attn_norm = f32(f, w, p + "attn_norm.weight", D);
      L.wq = view(w, f.tensor(p + "attn_q.weight", {D, D}));
      L.wk = view(w, f.tensor(p + "attn_k.weight", {D, Dkv}));
      L.wv = view(w, f.tensor(p + "attn_v.weight", {D, Dkv}));
      L.wo = view(w, f.tensor(p + "attn_output.weight", {D, D}));
      L.ffn_norm = f32(f, w, p + "ffn_norm.weight", D);
      L.w_gate = view(w, f.tensor(p + "ffn_gate.weight", {D, F}));
      L.w_up = view(w, f.tensor(p + "ffn_up.weight", {D, F}));
      L.w_down = view(w, f.tensor(p + "ffn_down.weight", {F, D}));
      layers_.push_back(L);
    }
  }

  kernels::Backend& be_;
  Precision precision_;
  std::vector<std::unique_ptr<float[]>> owned_;  // dequantized weights (Exact)
  std::vector<kernels::Buffer> resident_;       // weights in the backend's memory, when not host-visible
  ModelConfig cfg_;
  WeightView tok_embd_, output_;
  const float* out_norm_ = nullptr;
  std::vector<LlamaLayer> layers_;
  StepStaging staging_;
  ActivationBuffer x_, h_, q_, k_, v_, att_, gate_, up_, logits_;
};

}  // namespace

std::unique_ptr<Model> make_llama(const GgufFile& file, kernels::Backend& backend, Precision precision,
                                  WeightLoader& weights) {
  return std::make_unique<LlamaModel>(file, backend, precision, weights);
}

}  // namespace inferd::engine
