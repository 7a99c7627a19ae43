// The shared decoder (engine/models/decoder.hpp): pre-norm blocks with
// grouped-query attention, RoPE, RMSNorm and a SwiGLU feed-forward, with the
// architectures' optional projection biases, per-head query/key norms and
// Gemma's additions (see DecoderOptions).
// Under tensor parallelism (engine/models/tensor_parallel.hpp) a rank holds whole
// kv-head groups (their query heads, K/V and the matching columns of the output
// projection), a share of the feed-forward's hidden columns and a slice of the
// output vocabulary; the token embedding is replicated (a lookup reads a few
// rows: sharding it would save memory only, at one more all-reduce per step).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/gguf_reader.hpp"
#include "engine/hf_checkpoint.hpp"
#include "engine/kv/kv_cache.hpp"
#include "engine/models/decoder.hpp"
#include "engine/models/step_inputs.hpp"
#include "kernels/quantize.hpp"

namespace inferd::engine {
namespace {

using kernels::WeightView;

// Rows or columns [begin, end) of a weight; the whole of it by default.
struct Part {
  bool cols = false;
  int64_t begin = 0, end = -1;
};

struct DecoderLayer {
  const float* attn_norm;
  WeightView wq, wk, wv, wo;
  const float *bq = nullptr, *bk = nullptr, *bv = nullptr;  // projection biases, when the architecture has them
  const float *q_norm = nullptr, *k_norm = nullptr;         // per-head norms, when it has them
  const float* ffn_norm;
  WeightView w_gate, w_up, w_down;
  const float *attn_post_norm = nullptr, *ffn_post_norm = nullptr;  // when the architecture has them
  kernels::AttentionExtras attn;  // soft cap and sliding window, when it has them
  kernels::RopeParams rope;       // the model's, or the local layers' own
};

class DecoderModel final : public Model {
 public:
  DecoderModel(const GgufFile& f, kernels::Backend& be, Precision precision, WeightLoader& w, const TensorParallel& tp,
               const DecoderOptions& opts)
      : be_(be), precision_(precision), tp_(tp), opts_(opts) {
    read_config(f);
    plan_shards(f);
    load_weights(f, w);
  }

  const ModelConfig& config() const override { return cfg_; }

  // A rank of a group too: its gathered logits are in the backend's memory.
  bool samples_on_device() const override { return be_.can_sample() && !be_.host_visible(); }

  bool emits_features() const override { return !tp_.collective(); }
  SharedHead shared_head() const override {
    return {tok_embd_, output_, opts_.embed_scale ? std::sqrt(static_cast<float>(cfg_.dim)) : 1.0f};
  }

  void forward(const StepBatch& b, KvCache& kv, float* logits, int32_t* tokens, float* features) override {
    const int64_t T = static_cast<int64_t>(b.size());
    if (T == 0) return;
    const int D = cfg_.dim, H = heads_, Hkv = cfg_.kv_heads_here, hd = cfg_.head_dim;
    const int64_t R = static_cast<int64_t>(b.logits_rows.size());
    const StepInputs in = staging_.stage(be_, b);
    float* x = x_.reserve(be_, T * D);
    float* h = h_.reserve(be_, T * D);
    float* q = q_.reserve(be_, std::max<int64_t>(T * H * hd, R * D));
    float* k = k_.reserve(be_, T * Hkv * hd);
    float* v = v_.reserve(be_, T * Hkv * hd);
    float* att = att_.reserve(be_, T * H * hd);
    float* gate = gate_.reserve(be_, T * ffn_);
    float* up = up_.reserve(be_, T * ffn_);
    const int scale_width = cfg_.n_layers == opts_.width_scale_layers ? cfg_.dim / cfg_.n_heads : hd;
    const float scale = 1.0f / std::sqrt(static_cast<float>(scale_width));
    const int64_t reach = *std::max_element(b.positions.begin(), b.positions.end()) + int64_t{1};

    be_.get_rows(tok_embd_, in.tokens, T, x);
    if (opts_.embed_scale) be_.scale(x, std::sqrt(static_cast<float>(D)), T * D);
    be_.rmsnorm(x, layers_[0].attn_norm, h, T, D, cfg_.norm_eps);
    for (int l = 0; l < cfg_.n_layers; ++l) {
      const DecoderLayer& L = layers_[l];
      const auto kvl = kv.layer(l);
      // h: this layer's normed input (the previous layer normed it with its residual add).
      const kernels::MatmulOut qkv[] = {{L.wq, q}, {L.wk, k}, {L.wv, v}};
      be_.matmul_shared(qkv, h, T);
      if (opts_.qkv_bias) {
        be_.add_rows(q, L.bq, T, int64_t(H) * hd);
        be_.add_rows(k, L.bk, T, int64_t(Hkv) * hd);
        be_.add_rows(v, L.bv, T, int64_t(Hkv) * hd);
      }
      if (opts_.qk_norm) {
        be_.rmsnorm(q, L.q_norm, q, T * H, hd, cfg_.norm_eps);
        be_.rmsnorm(k, L.k_norm, k, T * Hkv, hd, cfg_.norm_eps);
      }
      be_.rope_kv_store(q, k, v, in.positions, T, H, L.rope, kvl, in.attn);
      be_.attention_extra(kvl, in.attn, T, reach, q, H, scale, L.attn, att);
      be_.matmul(L.wo, att, T, h);
      all_reduce(h, T * D);
      if (L.attn_post_norm) be_.rmsnorm(h, L.attn_post_norm, h, T, D, cfg_.norm_eps);
      be_.add_rmsnorm(x, h, L.ffn_norm, h, T, D, cfg_.norm_eps);

      if (opts_.gelu) {
        const kernels::MatmulOut gate_up[] = {{L.w_gate, gate}, {L.w_up, up}};
        be_.matmul_shared(gate_up, h, T);
        be_.gelu_mul(gate, up, gate, T * ffn_);
      } else {
        be_.matmul_silu_mul({L.w_gate, gate}, {L.w_up, up}, h, T);
      }
      be_.matmul(L.w_down, gate, T, h);
      all_reduce(h, T * D);
      if (L.ffn_post_norm) be_.rmsnorm(h, L.ffn_post_norm, h, T, D, cfg_.norm_eps);
      if (l + 1 < cfg_.n_layers)
        be_.add_rmsnorm(x, h, layers_[l + 1].attn_norm, h, T, D, cfg_.norm_eps);
      else
        be_.add(x, h, T * D);
    }

    // Only the rows whose logits are wanted go through the final norm and the head.
    if (R == 0) return;
    const kernels::WeightView rows{kernels::DType::F32, x, T, D, D * sizeof(float)};
    be_.get_rows(rows, in.logits_rows, R, h);
    be_.rmsnorm(h, out_norm_, q, R, D, cfg_.norm_eps);
    if (features) be_.download(features, q, static_cast<size_t>(R) * D * sizeof(float));
    const size_t n_logits = static_cast<size_t>(R) * cfg_.vocab;
    // Where the head writes: the host's logits, or device scratch downloaded
    // last (capped there too: a captured step's download lands after forward returns).
    float* out = be_.host_visible() ? logits : logits_.reserve(be_, n_logits);
    if (tp_.collective()) {
      gather_logits(q, R, out);  // capped there, each rank its own ids
    } else {
      be_.matmul(output_, q, R, out);
      if (final_softcap_ > 0) be_.softcap(out, final_softcap_, static_cast<int64_t>(n_logits));
    }
    if (!b.sampling.empty()) {
      if (!samples_on_device()) throw std::logic_error("forward: this model does not sample on its device");
      auto* sampled = reinterpret_cast<int32_t*>(sampled_.reserve(be_, R));  // ids in float-sized slots
      be_.sample(out, R, cfg_.vocab, in.sampling, sampled);
      be_.download(tokens, sampled, static_cast<size_t>(R) * sizeof(int32_t));
      if (!b.logits_too) return;
    }
    if (out != logits) be_.download(logits, out, n_logits * sizeof(float));
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
    // key_length: a head width other than dim / heads (some Hugging Face configs' head_dim).
    const auto key_length = f.get_int(a + ".attention.key_length");
    const auto value_length = f.get_int(a + ".attention.value_length");
    if (value_length && *value_length != key_length.value_or(cfg_.dim / cfg_.n_heads))
      throw LoadError(f.path(), 0, a + ".attention.value_length " + std::to_string(*value_length) +
                                       " differs from the key width: unsupported");
    if ((!key_length && cfg_.dim % cfg_.n_heads != 0) || cfg_.n_kv_heads <= 0 || cfg_.n_heads % cfg_.n_kv_heads != 0)
      throw LoadError(f.path(), 0, "inconsistent head counts");
    if (key_length && (*key_length <= 0 || *key_length > 1024))
      throw LoadError(f.path(), 0, "invalid " + a + ".attention.key_length");
    cfg_.head_dim = key_length ? static_cast<int>(*key_length) : cfg_.dim / cfg_.n_heads;
    cfg_.norm_eps = static_cast<float>(f.get_float(a + ".attention.layer_norm_rms_epsilon").value_or(1e-5));
    cfg_.rope.n_rot = static_cast<int>(f.get_int(a + ".rope.dimension_count").value_or(cfg_.head_dim));
    cfg_.rope.freq_base = static_cast<float>(f.get_float(a + ".rope.freq_base").value_or(10000.0));
    // GGUF llama stores Q/K permuted for adjacent-pair rotation; Hugging Face
    // checkpoints keep them as trained, for rotation by halves.
    cfg_.rope.neox = opts_.rope_neox || f.get_bool(kRopeNeoxKey).value_or(false);
    const std::string scaling = f.get_string(a + ".rope.scaling.type").value_or("none");
    if (scaling == "linear") {
      cfg_.rope.freq_scale = 1.0f / static_cast<float>(f.get_float(a + ".rope.scaling.factor").value_or(1.0));
    } else if (scaling != "none") {
      throw LoadError(f.path(), 0, "unsupported rope scaling '" + scaling + "'");
    }
    if (cfg_.rope.n_rot > cfg_.head_dim || cfg_.rope.n_rot % 2 != 0)
      throw LoadError(f.path(), 0, "invalid rope.dimension_count");
    const auto window = f.get_int(a + ".attention.sliding_window");
    if (window && *window <= 0) throw LoadError(f.path(), 0, "invalid " + a + ".attention.sliding_window");
    if (opts_.swa_pattern > 0) {
      // Local layers read a window, the others the whole context.
      if (!window) throw LoadError(f.path(), 0, "missing " + a + ".attention.sliding_window");
      window_ = static_cast<int32_t>(std::min<int64_t>(*window, cfg_.max_context));
    } else if (window) {
      // Sliding-window attention (Mistral v0.1) changes nothing while no sequence
      // outgrows the window: the model serves a context that long.
      cfg_.max_context = static_cast<int>(std::min<int64_t>(cfg_.max_context, *window));
    }
    auto cap = [&](const std::string& key, float fallback) {
      const double c = f.get_float(a + "." + key).value_or(fallback);
      if (!(c >= 0)) throw LoadError(f.path(), 0, "invalid " + a + "." + key);
      return static_cast<float>(c);
    };
    attn_softcap_ = cap("attn_logit_softcapping", opts_.attn_softcap);
    final_softcap_ = cap("final_logit_softcapping", opts_.final_softcap);
    const bool extra = opts_.embed_scale || opts_.gelu || attn_softcap_ > 0 || window_ > 0;
    if (extra && !be_.has_extra_ops())
      throw LoadError(f.path(), 0, "architecture '" + a + "' needs ops the " + be_.name() +
                                       " backend does not have (GELU, scaling, soft-capping, windowed attention)");
  }

  // This rank's heads, hidden columns and vocabulary: whole kv-head groups, and
  // hidden columns in whole quantization blocks so a row-parallel weight's
  // column slice starts on a block.
  void plan_shards(const GgufFile& f) {
    const int n = tp_.size;
    if (n < 1 || tp_.rank < 0 || tp_.rank >= n) throw LoadError(f.path(), 0, "invalid tensor-parallel rank");
    if (n > cfg_.n_kv_heads)
      throw LoadError(f.path(), 0, "tensor_parallel_size " + std::to_string(n) + " exceeds the model's " +
                                       std::to_string(cfg_.n_kv_heads) + " kv heads (each rank holds whole kv heads)");
    const int group = cfg_.n_heads / cfg_.n_kv_heads;
    const auto [kv0, kv1] = split_units(cfg_.n_kv_heads, n, tp_.rank);
    kv_first_ = static_cast<int>(kv0);
    cfg_.kv_heads_here = static_cast<int>(kv1 - kv0);
    heads_ = cfg_.kv_heads_here * group;
    constexpr int64_t kUnit = 32;  // the largest block of the supported weight types
    if (n > 1 && cfg_.ffn_dim % kUnit != 0)
      throw LoadError(f.path(), 0, "feed_forward_length " + std::to_string(cfg_.ffn_dim) +
                                       " is not a multiple of 32: it cannot be split across ranks");
    const auto [f0, f1] = n > 1 ? split_units(cfg_.ffn_dim / kUnit, n, tp_.rank) : std::pair<int64_t, int64_t>{0, 1};
    ffn_first_ = n > 1 ? f0 * kUnit : 0;
    ffn_ = n > 1 ? (f1 - f0) * kUnit : cfg_.ffn_dim;
  }

  // Reported done once it is ready to run: converted (Exact) or faulted in (Fast).
  WeightView view(WeightLoader& w, const GgufTensorInfo& t, Part part = {}) {
    if (precision_ != Precision::Exact && !be_.takes_weight_type(t.type))
      throw LoadError(f_->path(), t.info_offset,
                      "tensor " + t.name + " is " + std::string(kernels::traits(t.type).name) + ", which the " +
                          be_.name() + " backend does not take");
    WeightView v{t.type, t.data, t.rows(), t.cols(), kernels::row_bytes(t.type, t.cols())};
    if (part.end >= 0) v = part.cols ? slice_cols(f_, t, v, part) : slice_rows(v, part);
    if (precision_ == Precision::Exact && v.type != kernels::DType::F32) {
      // The reference path: one F32 copy, dequantized once at load.
      auto& buf = owned_.emplace_back(std::make_unique<float[]>(static_cast<size_t>(v.rows * v.cols)));
      for (int64_t r = 0; r < v.rows; ++r)
        kernels::dequantize_row(v.type, static_cast<const uint8_t*>(v.data) + r * v.row_stride,
                                buf.get() + r * v.cols, v.cols);
      v = WeightView{kernels::DType::F32, buf.get(), v.rows, v.cols, v.cols * sizeof(float)};
    }
    w.take(t);
    return resident(v);
  }

  static WeightView slice_rows(WeightView v, Part p) {
    v.data = static_cast<const uint8_t*>(v.data) + p.begin * v.row_stride;
    v.rows = p.end - p.begin;
    return v;
  }

  static WeightView slice_cols(const GgufFile* f, const GgufTensorInfo& t, WeightView v, Part p) {
    const int64_t blk = kernels::traits(v.type).block_elems;
    if (p.begin % blk != 0 || p.end % blk != 0)
      throw LoadError(f->path(), t.offset, t.name + ": a column split at " + std::to_string(p.begin) +
                                               " is not on a block of " + std::to_string(blk));
    v.data = static_cast<const uint8_t*>(v.data) + kernels::row_bytes(v.type, p.begin);
    v.cols = p.end - p.begin;
    return v;  // row_stride stays the whole row's
  }

  // Weights stay where they are on a host-visible backend (the file's mapping);
  // otherwise they are copied into the backend's memory once, at load, rows
  // packed together (a column slice leaves the rest of each row behind).
  WeightView resident(WeightView v) {
    if (be_.host_visible()) return v;
    const size_t packed = kernels::row_bytes(v.type, v.cols);
    std::vector<uint8_t> staging;
    const void* host = v.data;
    if (packed != v.row_stride) {
      staging.resize(packed * static_cast<size_t>(v.rows));
      for (int64_t r = 0; r < v.rows; ++r)
        std::memcpy(staging.data() + r * packed, static_cast<const uint8_t*>(v.data) + r * v.row_stride, packed);
      host = staging.data();
    }
    v.row_stride = packed;
    v.data = resident(host, packed * static_cast<size_t>(v.rows));
    return v;
  }

  const void* resident(const void* host, size_t bytes) {
    if (be_.host_visible()) return host;
    auto& buf = resident_.emplace_back(be_.alloc(bytes));
    be_.upload(buf.data(), host, bytes);
    return buf.data();
  }

  // Collectives run among the backend's ops, on its queue (a GPU rank's NCCL
  // on its stream), so a captured step holds them too; the group's generation
  // is in their signature, so a re-formed group records the step anew.
  void all_reduce(float* data, int64_t n) {
    if (!tp_.comm) return;
    const uint64_t args[] = {reinterpret_cast<uintptr_t>(data), static_cast<uint64_t>(n),
                             static_cast<uint64_t>(tp_.comm->generation())};
    be_.queue_external("all_reduce_sum", args, [comm = tp_.comm, data, n](void* queue) {
      comm->queue_all_reduce_sum(data, static_cast<size_t>(n), queue);
    });
  }

  // Each rank's logits for its slice of the vocabulary, gathered everywhere and
  // put in place row by row in `out` ([R][vocab], the backend's memory). A
  // rank's share of the gather is its [R][ids here] block as the head wrote it,
  // padded at its end to the common R * vocab_width_.
  void gather_logits(const float* normed, int64_t R, float* out) {
    const int64_t V = cfg_.vocab, width = vocab_width_, block = R * width;
    float* local = local_logits_.reserve(be_, block);
    be_.matmul(output_, normed, R, local);
    if (final_softcap_ > 0) be_.softcap(local, final_softcap_, R * output_.rows);  // elementwise: before the gather
    // Tracing shapes (no peers): this rank's block stands in for every rank's,
    // so the copies below are the ones a rank of the group makes.
    const float* all = local;
    int64_t stride = 0;
    if (tp_.comm) {
      float* gathered = gathered_.reserve(be_, block * tp_.size);
      const uint64_t args[] = {reinterpret_cast<uintptr_t>(local), static_cast<uint64_t>(block),
                               reinterpret_cast<uintptr_t>(gathered), static_cast<uint64_t>(tp_.comm->generation())};
      be_.queue_external("all_gather", args, [comm = tp_.comm, local, block, gathered](void* queue) {
        comm->queue_all_gather(local, static_cast<size_t>(block), gathered, queue);
      });
      all = gathered, stride = block;
    }
    for (int rank = 0; rank < tp_.size; ++rank) {
      const int64_t v0 = std::min(V, rank * width), n = std::min(V, v0 + width) - v0;
      if (n > 0) be_.copy_rows(all + rank * stride, n, out + v0, V, R, n);
    }
  }

  const float* f32(const GgufFile& f, WeightLoader& w, const std::string& name, int64_t n) {
    const auto& t = f.tensor(name, {n});
    if (t.type != kernels::DType::F32) throw LoadError(f.path(), t.offset, name + ": expected F32");
    return static_cast<const float*>(resident(w.take(t).data, static_cast<size_t>(n) * sizeof(float)));
  }

  void load_weights(const GgufFile& f, WeightLoader& w) {
    f_ = &f;
    const int64_t D = cfg_.dim, hd = cfg_.head_dim, Dkv = int64_t(cfg_.n_kv_heads) * hd, F = cfg_.ffn_dim;
    const int64_t Dq = int64_t(cfg_.n_heads) * hd;  // D unless the head width is set apart
    const auto& emb = f.tensor("token_embd.weight");
    if (emb.dims.size() != 2 || emb.dims[0] != D) throw LoadError(f.path(), emb.offset, "token_embd.weight: bad shape");
    cfg_.vocab = static_cast<int>(emb.dims[1]);
    const int64_t V = cfg_.vocab, group = cfg_.n_heads / cfg_.n_kv_heads;
    vocab_width_ = (V + tp_.size - 1) / tp_.size;
    const int64_t v0 = std::min(V, tp_.rank * vocab_width_);
    const Part vocab{false, v0, std::min(V, v0 + vocab_width_)};
    // Column-parallel (rows of the output) and row-parallel (columns of the input) parts.
    const Part q_rows{false, kv_first_ * group * hd, (kv_first_ + cfg_.kv_heads_here) * group * hd};
    const Part kv_rows{false, kv_first_ * hd, (kv_first_ + cfg_.kv_heads_here) * hd};
    const Part o_cols{true, q_rows.begin, q_rows.end};
    const Part ffn_rows{false, ffn_first_, ffn_first_ + ffn_};
    const Part down_cols{true, ffn_first_, ffn_first_ + ffn_};
    const bool whole = tp_.size == 1;
    tok_embd_ = view(w, emb);
    out_norm_ = f32(f, w, "output_norm.weight", D);
    if (f.find_tensor("output.weight")) {
      output_ = view(w, f.tensor("output.weight", {D, cfg_.vocab}), whole ? Part{} : vocab);
    } else {
      output_ = whole ? tok_embd_ : slice_rows(tok_embd_, vocab);
      cfg_.tied_embeddings = true;
    }
    for (int l = 0; l < cfg_.n_layers; ++l) {
      const std::string p = "blk." + std::to_string(l) + ".";
      DecoderLayer L;
      L.attn_norm = f32(f, w, p + "attn_norm.weight", D);
      L.wq = view(w, f.tensor(p + "attn_q.weight", {D, Dq}), whole ? Part{} : q_rows);
      L.wk = view(w, f.tensor(p + "attn_k.weight", {D, Dkv}), whole ? Part{} : kv_rows);
      L.wv = view(w, f.tensor(p + "attn_v.weight", {D, Dkv}), whole ? Part{} : kv_rows);
      L.wo = view(w, f.tensor(p + "attn_output.weight", {Dq, D}), whole ? Part{} : o_cols);
      if (opts_.qkv_bias) {  // this rank's slices, as the projections' rows
        L.bq = f32(f, w, p + "attn_q.bias", Dq) + q_rows.begin;
        L.bk = f32(f, w, p + "attn_k.bias", Dkv) + kv_rows.begin;
        L.bv = f32(f, w, p + "attn_v.bias", Dkv) + kv_rows.begin;
      }
      if (opts_.qk_norm) {
        L.q_norm = f32(f, w, p + "attn_q_norm.weight", hd);
        L.k_norm = f32(f, w, p + "attn_k_norm.weight", hd);
      }
      L.ffn_norm = f32(f, w, p + "ffn_norm.weight", D);
      if (opts_.post_norms) {
        L.attn_post_norm = f32(f, w, p + "post_attention_norm.weight", D);
        L.ffn_post_norm = f32(f, w, p + "post_ffw_norm.weight", D);
      }
      const bool local = opts_.swa_pattern > 0 && l % opts_.swa_pattern < opts_.swa_pattern - 1;
      L.attn = {attn_softcap_, local ? window_ : 0};
      L.rope = cfg_.rope;
      if (local && opts_.local_rope_base > 0) {
        L.rope.freq_base = opts_.local_rope_base;
        L.rope.freq_scale = 1.0f;
      }
      L.w_gate = view(w, f.tensor(p + "ffn_gate.weight", {D, F}), whole ? Part{} : ffn_rows);
      L.w_up = view(w, f.tensor(p + "ffn_up.weight", {D, F}), whole ? Part{} : ffn_rows);
      L.w_down = view(w, f.tensor(p + "ffn_down.weight", {F, D}), whole ? Part{} : down_cols);
      layers_.push_back(L);
    }
  }

  kernels::Backend& be_;
  Precision precision_;
  TensorParallel tp_;
  DecoderOptions opts_;
  const GgufFile* f_ = nullptr;
  int heads_ = 0;          // query heads on this rank
  int kv_first_ = 0;       // this rank's first kv head
  int64_t ffn_first_ = 0;  // this rank's first hidden column of the feed-forward
  int64_t ffn_ = 0;        // and how many it holds
  int64_t vocab_width_ = 0;  // output ids per rank (the last rank's slice may be shorter)
  int32_t window_ = 0;        // the local layers' sliding window (swa_pattern)
  float attn_softcap_ = 0, final_softcap_ = 0;
  std::vector<std::unique_ptr<float[]>> owned_;  // dequantized weights (Exact)
  std::vector<kernels::Buffer> resident_;       // weights in the backend's memory, when not host-visible
  ModelConfig cfg_;
  WeightView tok_embd_, output_;
  const float* out_norm_ = nullptr;
  std::vector<DecoderLayer> layers_;
  StepStaging staging_;
  ActivationBuffer x_, h_, q_, k_, v_, att_, gate_, up_, logits_, sampled_, local_logits_, gathered_;
};

}  // namespace

std::unique_ptr<Model> make_decoder(const GgufFile& file, kernels::Backend& backend, Precision precision,
                                    WeightLoader& weights, const TensorParallel& tp, const DecoderOptions& options) {
  return std::make_unique<DecoderModel>(file, backend, precision, weights, tp, options);
}

}  // namespace inferd::engine
