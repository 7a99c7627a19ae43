#include "engine/models/deepseek_v4_schema.hpp"

namespace inferd::engine {

DeepseekV4Dims read_deepseek_v4_dims(const JsonFile& c) {
  DeepseekV4Dims d;
  d.hidden = c.need_int("hidden_size");
  d.layers = c.need_int("num_hidden_layers");
  d.heads = c.need_int("num_attention_heads");
  d.head_dim = c.need_int("head_dim");
  d.q_lora = c.need_int("q_lora_rank");
  d.o_lora = c.need_int("o_lora_rank");
  d.o_groups = c.need_int("o_groups");
  d.vocab = c.need_int("vocab_size");
  d.experts = c.need_int("n_routed_experts");
  d.experts_per_tok = c.need_int("num_experts_per_tok");
  d.moe_inter = c.need_int("moe_intermediate_size");
  d.hash_layers = c.get_int("num_hash_layers").value_or(0);
  d.hc = c.need_int("hc_mult");
  d.index_heads = c.need_int("index_n_heads");
  d.index_head_dim = c.need_int("index_head_dim");
  if (d.heads % d.o_groups != 0) c.fail("o_groups", std::to_string(d.o_groups) + " does not divide num_attention_heads");
  if (d.hash_layers < 0 || d.hash_layers > d.layers) c.fail("num_hash_layers", "out of range");
  if (d.experts_per_tok > d.experts) c.fail("num_experts_per_tok", "more than n_routed_experts");
  return d;
}

namespace {

// The config's dimensions, each read once (JsonFile names the key on error).
struct Dims : DeepseekV4Dims {
  int64_t shared_inter;
  std::vector<int64_t> ratios;  // one per layer, then one per draft stage
  int64_t stages;
  std::string linear_dtype, scale_dtype;  // scale_dtype "": no scales
  int64_t block_out, block_in;
  bool fp4_experts;
  // DSpark; markov_rank 0 when the draft stages are a NextN head.
  int64_t markov_rank = 0, taps = 0;
};

Dims read_dims(const JsonFile& c) {
  Dims d{};
  static_cast<DeepseekV4Dims&>(d) = read_deepseek_v4_dims(c);
  d.shared_inter = d.moe_inter * c.get_int("n_shared_experts").value_or(1);

  d.ratios = c.get_ints("compress_ratios").value_or(std::vector<int64_t>{});
  if (static_cast<int64_t>(d.ratios.size()) < d.layers)
    c.fail("compress_ratios", std::to_string(d.ratios.size()) + " entries, fewer than num_hidden_layers " +
                                  std::to_string(d.layers));
  for (int64_t r : d.ratios)
    if (r < 0 || r == 1 || r > 65536) c.fail("compress_ratios", "entry " + std::to_string(r) + " is not 0 or a ratio above 1");
  // Entries past the layers are the draft stages'; else num_nextn_predict_layers window-only stages.
  d.stages = static_cast<int64_t>(d.ratios.size()) - d.layers;
  if (d.stages == 0) {
    d.stages = c.get_int("num_nextn_predict_layers").value_or(0);
    if (d.stages < 0 || d.stages > 64) c.fail("num_nextn_predict_layers", "out of range");
    d.ratios.resize(static_cast<size_t>(d.layers + d.stages), 0);
  }

  d.linear_dtype = "BF16";
  d.block_out = d.block_in = 128;
  if (const auto* q = c.find("quantization_config")) {
    const std::string key = "quantization_config";
    if (!q->is_object()) c.fail(key, "not an object");
    const auto& o = q->as_object();
    if (const auto* m = o.if_contains("quant_method"); m && !(m->is_string() && m->as_string() == "fp8"))
      c.fail(key + ".quant_method", "only \"fp8\" is supported");
    if (const auto* f = o.if_contains("fmt"); f && !(f->is_string() && f->as_string() == "e4m3"))
      c.fail(key + ".fmt", "only \"e4m3\" is supported");
    if (const auto* b = o.if_contains("weight_block_size")) {
      if (!b->is_array() || b->as_array().size() != 2 || !b->as_array()[0].is_int64() || !b->as_array()[1].is_int64() ||
          b->as_array()[0].as_int64() <= 0 || b->as_array()[1].as_int64() <= 0)
        c.fail(key + ".weight_block_size", "not two positive integers");
      d.block_out = b->as_array()[0].as_int64();
      d.block_in = b->as_array()[1].as_int64();
    }
    const auto* s = o.if_contains("scale_fmt");
    const bool ue8m0 = s && s->is_string() && s->as_string() == "ue8m0";
    if (s && !s->is_null() && !ue8m0) c.fail(key + ".scale_fmt", "only \"ue8m0\" (or none, for F32 scales) is supported");
    d.linear_dtype = "F8_E4M3";
    d.scale_dtype = ue8m0 ? "F8_E8M0" : "F32";
  }
  const std::string experts = c.get_string("expert_dtype").value_or(d.scale_dtype.empty() ? "bf16" : "fp8");
  if (experts != "fp4" && experts != (d.scale_dtype.empty() ? "bf16" : "fp8"))
    c.fail("expert_dtype", "'" + experts + "' is not supported with this quantization_config");
  d.fp4_experts = experts == "fp4";
  if (d.fp4_experts && (d.hidden % 32 != 0 || d.moe_inter % 32 != 0))
    c.fail("expert_dtype", "fp4 experts need hidden_size and moe_intermediate_size divisible by 32");

  if (c.find("dspark_markov_rank")) {
    d.markov_rank = c.need_int("dspark_markov_rank");
    const auto taps = c.get_ints("dspark_target_layer_ids");
    if (!taps || taps->empty()) c.fail("dspark_target_layer_ids", "missing (needed with dspark_markov_rank)");
    d.taps = static_cast<int64_t>(taps->size());
    if (d.stages == 0) c.fail("compress_ratios", "no entries past num_hidden_layers for the DSpark stages");
  }
  return d;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

class Schema {
 public:
  explicit Schema(const Dims& d) : d_(d) {}
  std::vector<ParamSpec> take() { return std::move(out_); }

  void add(const std::string& name, const std::string& dtype, std::vector<int64_t> shape) {
    out_.push_back({name, dtype, std::move(shape), draft_});
  }
  void norm(const std::string& name, int64_t n) { add(name + ".weight", "BF16", {n}); }
  // A block-quantized linear layer (or BF16 when the checkpoint is not quantized).
  void linear(const std::string& name, int64_t out, int64_t in) {
    add(name + ".weight", d_.linear_dtype, {out, in});
    if (!d_.scale_dtype.empty()) add(name + ".scale", d_.scale_dtype, {ceil_div(out, d_.block_out), ceil_div(in, d_.block_in)});
  }
  void expert_linear(const std::string& name, int64_t out, int64_t in) {
    if (!d_.fp4_experts) return linear(name, out, in);
    add(name + ".weight", "I8", {out, in / 2});
    add(name + ".scale", "F8_E8M0", {out, in / 32});
  }
  // Hyper-connection mixer `prefix_{fn,base,scale}` of `mixes` outputs from the hc_mult streams.
  void hyper_connection(const std::string& prefix, int64_t mixes, int64_t scales) {
    add(prefix + "_fn", "F32", {mixes, d_.hc * d_.hidden});
    add(prefix + "_base", "F32", {mixes});
    add(prefix + "_scale", "F32", {scales});
  }
  void hc_head(const std::string& prefix) { hyper_connection(prefix + "hc_head", d_.hc, 1); }

  void compressor(const std::string& p, int64_t ratio, int64_t dim) {
    const int64_t coff = ratio == 4 ? 2 : 1;  // ratio-4 windows overlap: two halves
    add(p + "wkv.weight", "BF16", {coff * dim, d_.hidden});
    add(p + "wgate.weight", "BF16", {coff * dim, d_.hidden});
    add(p + "ape", "F32", {ratio, coff * dim});
    norm(p + "norm", dim);
  }

  void block(const std::string& p, int64_t ratio, bool hash_routed) {
    const int64_t mixes = (2 + d_.hc) * d_.hc;  // pre, post and the hc x hc combination
    norm(p + "attn_norm", d_.hidden);
    norm(p + "ffn_norm", d_.hidden);
    hyper_connection(p + "hc_attn", mixes, 3);
    hyper_connection(p + "hc_ffn", mixes, 3);
    add(p + "attn.attn_sink", "F32", {d_.heads});
    norm(p + "attn.q_norm", d_.q_lora);
    norm(p + "attn.kv_norm", d_.head_dim);
    linear(p + "attn.wq_a", d_.q_lora, d_.hidden);
    linear(p + "attn.wq_b", d_.heads * d_.head_dim, d_.q_lora);
    linear(p + "attn.wkv", d_.head_dim, d_.hidden);
    linear(p + "attn.wo_a", d_.o_groups * d_.o_lora, d_.heads * d_.head_dim / d_.o_groups);
    linear(p + "attn.wo_b", d_.hidden, d_.o_groups * d_.o_lora);
    if (ratio != 0) {
      compressor(p + "attn.compressor.", ratio, d_.head_dim);
      if (ratio == 4) {  // compressed sparse attention: the top-k indexer
        linear(p + "attn.indexer.wq_b", d_.index_heads * d_.index_head_dim, d_.q_lora);
        add(p + "attn.indexer.weights_proj.weight", "BF16", {d_.index_heads, d_.hidden});
        compressor(p + "attn.indexer.compressor.", ratio, d_.index_head_dim);
      }
    }
    add(p + "ffn.gate.weight", "BF16", {d_.experts, d_.hidden});
    if (hash_routed) add(p + "ffn.gate.tid2eid", "I64", {d_.vocab, d_.experts_per_tok});
    else add(p + "ffn.gate.bias", "F32", {d_.experts});
    for (const char* w : {"w1", "w3"}) linear(p + "ffn.shared_experts." + w, d_.shared_inter, d_.hidden);
    linear(p + "ffn.shared_experts.w2", d_.hidden, d_.shared_inter);
    for (int64_t e = 0; e < d_.experts; ++e) {
      const std::string x = p + "ffn.experts." + std::to_string(e) + ".";
      expert_linear(x + "w1", d_.moe_inter, d_.hidden);
      expert_linear(x + "w3", d_.moe_inter, d_.hidden);
      expert_linear(x + "w2", d_.hidden, d_.moe_inter);
    }
  }

  void model() {
    add("embed.weight", "BF16", {d_.vocab, d_.hidden});
    add("head.weight", "BF16", {d_.vocab, d_.hidden});
    norm("norm", d_.hidden);
    hc_head("");
    for (int64_t l = 0; l < d_.layers; ++l)
      block("layers." + std::to_string(l) + ".", d_.ratios[static_cast<size_t>(l)], l < d_.hash_layers);
    draft_ = true;
    for (int64_t s = 0; s < d_.stages; ++s) {
      const std::string p = "mtp." + std::to_string(s) + ".";
      block(p, d_.ratios[static_cast<size_t>(d_.layers + s)], false);
      const bool first = s == 0, last = s + 1 == d_.stages;
      if (d_.markov_rank == 0) {  // NextN head on each stage
        linear(p + "e_proj", d_.hidden, d_.hidden);
        linear(p + "h_proj", d_.hidden, d_.hidden);
        norm(p + "enorm", d_.hidden);
        norm(p + "hnorm", d_.hidden);
        norm(p + "norm", d_.hidden);
        hc_head(p);
        continue;
      }
      if (first) {  // the target's tapped hidden states, projected once for all stages
        linear(p + "main_proj", d_.hidden, d_.taps * d_.hidden);
        norm(p + "main_norm", d_.hidden);
      }
      if (last) {
        norm(p + "norm", d_.hidden);
        hc_head(p);
        add(p + "markov_head.markov_w1.weight", "BF16", {d_.vocab, d_.markov_rank});
        add(p + "markov_head.markov_w2.weight", "BF16", {d_.vocab, d_.markov_rank});
        add(p + "confidence_head.proj.weight", "BF16", {1, d_.hidden + d_.markov_rank});
      }
    }
  }

 private:
  const Dims& d_;
  bool draft_ = false;
  std::vector<ParamSpec> out_;
};

}  // namespace

std::vector<ParamSpec> deepseek_v4_params(const JsonFile& config) {
  const Dims d = read_dims(config);
  Schema s(d);
  s.model();
  return s.take();
}

}  // namespace inferd::engine
