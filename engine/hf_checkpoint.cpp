#include "engine/hf_checkpoint.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <boost/json.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <unordered_map>

#include "engine/json_file.hpp"
#include "engine/pretokenizer.hpp"
#include "engine/safetensors_checkpoint.hpp"
#include "engine/sentencepiece_bpe.hpp"
#include "kernels/quantize.hpp"

namespace inferd::engine {
namespace {

namespace json = boost::json;

// ---- a metadata-only GGUF image ---------------------------------------------------

class MetadataImage {
 public:
  void str(const std::string& key, const std::string& v) {
    begin(key, GgufType::STRING);
    put_string(v);
  }
  void u32(const std::string& key, int64_t v) {
    begin(key, GgufType::U32);
    put(static_cast<uint32_t>(v));
  }
  void f32(const std::string& key, double v) {
    begin(key, GgufType::F32);
    put(static_cast<float>(v));
  }
  void boolean(const std::string& key, bool v) {
    begin(key, GgufType::BOOL);
    put(static_cast<uint8_t>(v));
  }
  void strings(const std::string& key, const std::vector<std::string>& v) {
    begin(key, GgufType::ARRAY);
    put(static_cast<uint32_t>(GgufType::STRING));
    put(static_cast<uint64_t>(v.size()));
    for (const auto& s : v) put_string(s);
  }
  void f32s(const std::string& key, const std::vector<float>& v) {
    begin(key, GgufType::ARRAY);
    put(static_cast<uint32_t>(GgufType::F32));
    put(static_cast<uint64_t>(v.size()));
    for (float x : v) put(x);
  }
  void i32s(const std::string& key, const std::vector<int32_t>& v) {
    begin(key, GgufType::ARRAY);
    put(static_cast<uint32_t>(GgufType::I32));
    put(static_cast<uint64_t>(v.size()));
    for (int32_t x : v) put(x);
  }
  std::vector<uint8_t> image() const {
    std::vector<uint8_t> out;
    auto raw = [&](const auto& v) {
      const auto* p = reinterpret_cast<const uint8_t*>(&v);
      out.insert(out.end(), p, p + sizeof v);
    };
    out.insert(out.end(), {'G', 'G', 'U', 'F'});
    raw(uint32_t{3});
    raw(uint64_t{0});  // tensors: none in the image
    raw(count_);
    out.insert(out.end(), body_.begin(), body_.end());
    return out;
  }

 private:
  template <class T>
  void put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    body_.insert(body_.end(), p, p + sizeof v);
  }
  void put_string(const std::string& s) {
    put(static_cast<uint64_t>(s.size()));
    body_.insert(body_.end(), s.begin(), s.end());
  }
  void begin(const std::string& key, GgufType t) {
    put_string(key);
    put(static_cast<uint32_t>(t));
    ++count_;
  }
  std::vector<uint8_t> body_;
  uint64_t count_ = 0;
};

// ---- architectures ---------------------------------------------------------------

// The causal LMs the shared decoder runs (engine/models/decoder.hpp), told apart
// by their attention's extra weights.
struct Arch {
  std::string_view hf;    // config.json's architectures[0]
  std::string_view gguf;  // general.architecture: the loader and the keys' prefix
  bool qkv_bias;          // self_attn.{q,k,v}_proj.bias
  bool qk_norm;           // self_attn.{q,k}_norm.weight: RMSNorm of each head
};

constexpr Arch kArchs[] = {
    {"LlamaForCausalLM", "llama", false, false},
    {"Qwen2ForCausalLM", "qwen2", true, false},
    {"Qwen3ForCausalLM", "qwen3", false, true},
};

std::string arch_names() {
  std::string out;
  for (const Arch& a : kArchs) out += (out.empty() ? "" : ", ") + std::string(a.hf);
  return out;
}

// A layer's HF tensor names (after "model.layers.N.") -> GGUF names (after
// "blk.N."); "" for names a checkpoint may carry unused.
std::map<std::string, std::string, std::less<>> layer_tensors(const Arch& arch) {
  std::map<std::string, std::string, std::less<>> m = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
      {"self_attn.rotary_emb.inv_freq", ""},  // older checkpoints save RoPE's table
  };
  if (arch.qkv_bias)
    m.insert({{"self_attn.q_proj.bias", "attn_q.bias"},
              {"self_attn.k_proj.bias", "attn_k.bias"},
              {"self_attn.v_proj.bias", "attn_v.bias"}});
  if (arch.qk_norm)
    m.insert({{"self_attn.q_norm.weight", "attn_q_norm.weight"}, {"self_attn.k_norm.weight", "attn_k_norm.weight"}});
  return m;
}

// ---- config.json ---------------------------------------------------------------

struct Config {
  const Arch* arch = nullptr;
  int64_t layers = 0;
  bool tied = false;
};

Config read_config(const JsonFile& c, MetadataImage& m) {
  Config out;
  const auto& o = c.object();
  const json::value* archs = o.if_contains("architectures");
  if (!archs || !archs->is_array() || archs->as_array().empty() || !archs->as_array()[0].is_string())
    c.fail("architectures", "missing (need one of " + arch_names() + ")");
  const std::string name(archs->as_array()[0].as_string());
  for (const Arch& a : kArchs)
    if (a.hf == name) out.arch = &a;
  if (!out.arch) c.fail("architectures", "'" + name + "' is not supported (only " + arch_names() + ")");
  const Arch& arch = *out.arch;
  const std::string p = std::string(arch.gguf) + ".";

  if (auto act = c.get_string("hidden_act"); act && *act != "silu")
    c.fail("hidden_act", "'" + *act + "' is not supported (only silu)");
  if (c.get_bool("mlp_bias").value_or(false)) c.fail("mlp_bias", "biases are not supported");
  // Qwen2's projections always carry biases (its config has no such key);
  // the others' never do.
  if (auto bias = c.get_bool("attention_bias"); bias && *bias != arch.qkv_bias)
    c.fail("attention_bias", std::string(*bias ? "true" : "false") + " is not supported for " + name + " (" +
                                 (arch.qkv_bias ? "its q/k/v projections have biases" : "biases are not supported") + ")");
  // Sliding-window layers would attend differently from the decoder's full attention.
  if (c.get_bool("use_sliding_window").value_or(false))
    c.fail("use_sliding_window", "true is not supported (only full attention in every layer)");
  if (const json::value* lt = c.find("layer_types")) {
    if (!lt->is_array()) c.fail("layer_types", "not an array");
    for (const auto& t : lt->as_array())
      if (!t.is_string() || t.as_string() != "full_attention")
        c.fail("layer_types", json::serialize(t) + " is not supported (only \"full_attention\")");
  }

  const int64_t dim = c.need_int("hidden_size");
  const int64_t heads = c.need_int("num_attention_heads");
  const int64_t kv_heads = c.get_int("num_key_value_heads").value_or(heads);
  if (kv_heads <= 0 || heads % kv_heads != 0)
    c.fail("num_key_value_heads", std::to_string(kv_heads) + " does not divide num_attention_heads");
  std::optional<int64_t> head_dim = c.get_int("head_dim");
  if (!head_dim) {
    if (dim % heads != 0) c.fail("num_attention_heads", "does not divide hidden_size and head_dim is not given");
    head_dim = dim / heads;
  }
  if (*head_dim <= 0 || *head_dim % 2 != 0) c.fail("head_dim", std::to_string(*head_dim) + " is not a positive even number");

  out.layers = c.need_int("num_hidden_layers");
  m.str("general.architecture", std::string(arch.gguf));
  m.u32(p + "block_count", out.layers);
  m.u32(p + "embedding_length", dim);
  m.u32(p + "feed_forward_length", c.need_int("intermediate_size"));
  m.u32(p + "attention.head_count", heads);
  m.u32(p + "attention.head_count_kv", kv_heads);
  m.u32(p + "attention.key_length", *head_dim);
  m.u32(p + "context_length", c.need_int("max_position_embeddings"));
  m.f32(p + "attention.layer_norm_rms_epsilon", c.get_float("rms_norm_eps").value_or(1e-6));
  m.u32(p + "rope.dimension_count", *head_dim);
  m.boolean(kRopeNeoxKey, true);

  // RoPE: rope_theta and rope_scaling, or (newer transformers) rope_parameters
  // holding rope_theta, rope_type and the scaling's own keys.
  const std::string where = c.find("rope_parameters") ? "rope_parameters" : "rope_scaling";
  const json::value* rs = c.find(where);
  if (rs && !rs->is_object()) c.fail(where, "not an object");
  std::optional<double> theta = c.get_float("rope_theta");
  if (!theta && rs)
    if (const json::value* t = rs->as_object().if_contains("rope_theta")) {
      if (!t->is_number()) c.fail(where + ".rope_theta", "not a number");
      theta = t->to_number<double>();
    }
  m.f32(p + "rope.freq_base", theta.value_or(10000.0));
  if (rs) {
    const auto& s = rs->as_object();
    const json::value* type = s.if_contains("rope_type");
    std::string key = where + ".rope_type";
    if (!type) {
      type = s.if_contains("type");
      key = where + ".type";
    }
    if (type && !type->is_string()) c.fail(key, "not a string");
    const std::string t = type ? std::string(type->as_string()) : "default";
    if (t == "linear") {
      const json::value* f = s.if_contains("factor");
      if (!f || !f->is_number() || f->to_number<double>() <= 0)
        c.fail(where + ".factor", "missing or not a positive number");
      m.str(p + "rope.scaling.type", "linear");
      m.f32(p + "rope.scaling.factor", f->to_number<double>());
    } else if (t != "default") {
      c.fail(key, "'" + t + "' is not supported (only linear)");
    }
  }
  out.tied = c.get_bool("tie_word_embeddings").value_or(false);
  return out;
}

// ---- weights ---------------------------------------------------------------------

// HF tensor name -> GGUF name; "" for names a checkpoint may carry unused.
std::optional<std::string> gguf_name(const std::map<std::string, std::string, std::less<>>& layer,
                                     const std::string& hf) {
  static const std::map<std::string, std::string, std::less<>> top = {
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"},
  };
  if (auto it = top.find(hf); it != top.end()) return it->second;
  constexpr std::string_view prefix = "model.layers.";
  if (!hf.starts_with(prefix)) return std::nullopt;
  const size_t dot = hf.find('.', prefix.size());
  if (dot == std::string::npos || dot == prefix.size()) return std::nullopt;
  const std::string n = hf.substr(prefix.size(), dot - prefix.size());
  if (n.find_first_not_of("0123456789") != std::string::npos || n.size() > 6) return std::nullopt;
  const auto it = layer.find(std::string_view(hf).substr(dot + 1));
  if (it == layer.end()) return std::nullopt;
  return it->second.empty() ? "" : "blk." + std::to_string(std::stoi(n)) + "." + it->second;
}

std::optional<kernels::DType> weight_type(std::string_view dtype) {
  if (dtype == "BF16") return kernels::DType::BF16;
  if (dtype == "F16") return kernels::DType::F16;
  if (dtype == "F32") return kernels::DType::F32;
  return std::nullopt;
}

struct Weights {
  std::vector<GgufTensorInfo> tensors;
  std::vector<std::shared_ptr<const void>> keep;
};

Weights read_weights(const std::string& dir, const Config& cfg) {
  Weights w;
  const bool tied = cfg.tied;
  const auto layer = layer_tensors(*cfg.arch);
  const auto checkpoint = SafetensorsCheckpoint::open(dir);
  for (const auto& st : checkpoint.files()) {
    for (const auto& t : st->tensors()) {
      auto fail = [&](const std::string& msg) { throw LoadError(st->path(), t.offset, "tensor '" + t.name + "': " + msg); };
      const auto gguf = gguf_name(layer, t.name);
      if (!gguf) fail("not a " + std::string(cfg.arch->hf) + " weight (unsupported architecture variant?)");
      if (gguf->empty() || (tied && *gguf == "output.weight")) continue;  // unused
      const auto type = weight_type(t.dtype);
      if (!type) fail("dtype " + t.dtype + " is not supported (only BF16, F16, F32)");
      if (t.shape.empty() || t.shape.size() > 2) fail(std::to_string(t.shape.size()) + " dimensions (need 1 or 2)");
      // GGUF lists dims innermost first; the bytes are the same row-major matrix.
      std::vector<int64_t> dims(t.shape.rbegin(), t.shape.rend());
      if (dims[0] == 0) fail("is empty");
      const void* data = t.data;
      kernels::DType dt = *type;
      size_t nbytes = t.nbytes;
      if (reinterpret_cast<uintptr_t>(data) % kernels::traits(dt).block_bytes != 0) {
        // The format does not align tensor data; the kernels load whole
        // elements, so a misaligned tensor gets an aligned copy.
        auto buf = std::shared_ptr<uint8_t[]>(new uint8_t[nbytes]);
        std::memcpy(buf.get(), t.data, nbytes);
        data = buf.get();
        w.keep.push_back(std::shared_ptr<const void>(buf, buf.get()));
      }
      if (dims.size() == 1 && dt != kernels::DType::F32) {
        // Norm weights: the loader takes them as F32; they are a few KB.
        auto buf = std::shared_ptr<float[]>(new float[static_cast<size_t>(dims[0])]);
        kernels::dequantize_row(dt, data, buf.get(), dims[0]);
        data = buf.get();
        w.keep.push_back(std::shared_ptr<const void>(buf, buf.get()));
        dt = kernels::DType::F32;
        nbytes = static_cast<size_t>(dims[0]) * sizeof(float);
      }
      w.tensors.push_back(GgufTensorInfo{*gguf, dt, std::move(dims), t.offset, nbytes, data, t.offset});
    }
    w.keep.push_back(st);
  }
  if (!tied && !checkpoint.find("lm_head.weight").tensor)
    throw LoadError(dir + "/config.json", 0,
                    "key 'tie_word_embeddings': false, but the checkpoint has no tensor 'lm_head.weight'");
  // Named here in HF's terms: the loader would report the GGUF name.
  const std::string weights = dir + "/" + (checkpoint.sharded() ? kSafetensorsIndex : "model.safetensors");
  for (const char* top : {"model.embed_tokens.weight", "model.norm.weight"})
    if (!checkpoint.find(top).tensor) throw LoadError(weights, 0, "tensor '" + std::string(top) + "' is missing");
  for (int64_t l = 0; l < cfg.layers; ++l)
    for (const auto& [hf, gguf] : layer) {
      const std::string name = "model.layers." + std::to_string(l) + "." + hf;
      if (!gguf.empty() && !checkpoint.find(name).tensor)
        throw LoadError(weights, 0, "tensor '" + name + "' is missing (" + std::string(cfg.arch->hf) + " has it in every layer)");
    }
  return w;
}

// ---- tokenizer ------------------------------------------------------------------

// The token string of a tokenizer_config.json entry: "text" or {"content": "text"}.
std::optional<std::string> token_content(const JsonFile& f, const std::string& key) {
  const json::value* v = f.find(key);
  if (!v) return std::nullopt;
  if (v->is_string()) return std::string(v->as_string());
  if (v->is_object())
    if (const auto* c = v->as_object().if_contains("content"); c && c->is_string()) return std::string(c->as_string());
  f.fail(key, "not a token string");
}

// The pre-tokenizer family whose regexes tokenizer.json's pre_tokenizer spells.
std::string pre_tokenizer_family(const JsonFile& tj) {
  const json::value* pre = tj.find("pre_tokenizer");
  if (!pre || !pre->is_object()) tj.fail("pre_tokenizer", "missing (need a ByteLevel pre-tokenizer)");
  std::vector<json::value> steps;
  const auto& o = pre->as_object();
  const json::value* type = o.if_contains("type");
  if (type && type->is_string() && type->as_string() == "Sequence") {
    const json::value* list = o.if_contains("pretokenizers");
    if (!list || !list->is_array()) tj.fail("pre_tokenizer.pretokenizers", "missing");
    for (const auto& s : list->as_array()) steps.push_back(s);
  } else {
    steps.push_back(*pre);
  }
  std::vector<std::string> patterns;
  bool byte_level = false;
  for (const auto& s : steps) {
    const std::string t = s.is_object() && s.as_object().contains("type") && s.as_object().at("type").is_string()
                              ? std::string(s.as_object().at("type").as_string())
                              : "";
    const auto& so = s.is_object() ? s.as_object() : json::object();
    auto flag = [&](const char* k, bool dflt) {
      const json::value* v = so.if_contains(k);
      return v && v->is_bool() ? v->as_bool() : dflt;
    };
    if (t == "ByteLevel") {
      if (flag("add_prefix_space", false)) tj.fail("pre_tokenizer", "ByteLevel with add_prefix_space is not supported");
      if (flag("use_regex", true)) patterns.emplace_back(PreTokenizer::gpt2_pattern());
      byte_level = true;
    } else if (t == "Digits" && !byte_level) {
      if (!flag("individual_digits", false)) tj.fail("pre_tokenizer", "Digits without individual_digits is not supported");
      patterns.emplace_back(PreTokenizer::digits_pattern());
    } else if (t == "Split" && !byte_level) {
      const json::value* pat = so.if_contains("pattern");
      const json::value* re = pat && pat->is_object() ? pat->as_object().if_contains("Regex") : nullptr;
      const json::value* behavior = so.if_contains("behavior");
      if (!re || !re->is_string() || !behavior || !behavior->is_string() || behavior->as_string() != "Isolated" ||
          flag("invert", false))
        tj.fail("pre_tokenizer", "only Split with an isolated Regex pattern is supported");
      patterns.emplace_back(re->as_string());
    } else {
      tj.fail("pre_tokenizer", "step '" + t + "' is not supported (supported: Split, Digits, then ByteLevel)");
    }
  }
  if (!byte_level) tj.fail("pre_tokenizer", "no ByteLevel step: only byte-level BPE is supported");
  auto family = PreTokenizer::family_of(patterns);
  if (!family) tj.fail("pre_tokenizer", "its regexes match none of the pre-tokenizers inferd has (GPT-2, SmolLM, Llama 3, Qwen2, DeepSeek-V3)");
  return *family;
}

// SentencePiece-style tokenizer.json (BPE with byte fallback: Llama 2, Mistral,
// TinyLlama): whether the text gets a "▁" in front (and after each special
// token), read from the two spellings transformers writes: the legacy
// normalizer [Prepend "▁", Replace " " -> "▁"], or a Metaspace pre-tokenizer
// that does both. Anything else is refused, naming the key.
bool sentencepiece_space_prefix(const JsonFile& tj) {
  const json::value* n = tj.find("normalizer");
  const json::value* pre = tj.find("pre_tokenizer");
  auto is = [](const json::value& v, std::string_view type) {
    const auto* o = v.if_object();
    const json::value* t = o ? o->if_contains("type") : nullptr;
    return t && t->is_string() && t->as_string() == type;
  };
  auto str = [](const json::value& v, std::string_view key) -> std::string {
    const json::value* f = v.is_object() ? v.as_object().if_contains(key) : nullptr;
    return f && f->is_string() ? std::string(f->as_string()) : std::string();
  };
  if (n && !n->is_null()) {
    if (pre && !pre->is_null()) tj.fail("pre_tokenizer", "a SentencePiece-style tokenizer with a normalizer takes none");
    std::vector<json::value> steps{*n};
    if (is(*n, "Sequence") && n->as_object().contains("normalizers") && n->as_object().at("normalizers").is_array())
      steps.assign(n->as_object().at("normalizers").as_array().begin(), n->as_object().at("normalizers").as_array().end());
    const bool prepend = steps.size() == 2 && is(steps[0], "Prepend") && str(steps[0], "prepend") == "\u2581";
    const json::value& replace = steps.back();
    const json::value* pattern = replace.is_object() ? replace.as_object().if_contains("pattern") : nullptr;
    const bool spaces = is(replace, "Replace") && pattern && str(*pattern, "String") == " " && str(replace, "content") == "\u2581";
    if (!spaces || (steps.size() == 2 && !prepend) || steps.size() > 2)
      tj.fail("normalizer", json::serialize(*n) + " is not supported (SentencePiece-style: Prepend \"\u2581\" then Replace \" \" with \"\u2581\")");
    return prepend;
  }
  if (!pre || !is(*pre, "Metaspace") || str(*pre, "replacement") != "\u2581")
    tj.fail("pre_tokenizer", "a SentencePiece-style tokenizer needs the Prepend/Replace normalizer or a Metaspace pre-tokenizer");
  const json::value* split = pre->as_object().if_contains("split");
  if (split && split->is_bool() && split->as_bool())
    tj.fail("pre_tokenizer.split", "true is not supported (SentencePiece does not split at spaces first)");
  const std::string scheme = str(*pre, "prepend_scheme");
  if (scheme != "always" && scheme != "never")
    tj.fail("pre_tokenizer.prepend_scheme", "'" + scheme + "' is not supported (always or never)");
  return scheme == "always";
}

// Scores for inferd's SentencePiece merge order (engine/sentencepiece_bpe.hpp),
// which merges the adjacent pair whose joined token scores highest: each token
// scores minus the rank of the first merge that makes it, so merges happen in
// the file's order, and a token no merge makes scores -infinity (never made by
// merging, as the `tokenizers` library never makes it).
std::vector<float> merge_scores(const JsonFile& tj, const std::vector<std::string>& tokens,
                                const std::vector<std::pair<std::string, std::string>>& merges) {
  std::unordered_map<std::string_view, size_t> id;
  for (size_t i = 0; i < tokens.size(); ++i) id.emplace(tokens[i], i);
  std::vector<float> scores(tokens.size(), -std::numeric_limits<float>::infinity());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string joined = merges[rank].first + merges[rank].second;
    auto it = id.find(joined);
    if (it == id.end()) tj.fail("model.merges", "merge " + std::to_string(rank) + " makes '" + joined + "', which is not in the vocabulary");
    scores[it->second] = std::max(scores[it->second], -static_cast<float>(rank));
  }
  return scores;
}

void read_tokenizer(const std::string& dir, MetadataImage& m) {
  const auto tj = *read_json(dir + "/tokenizer.json", true);
  const json::value* model = tj.find("model");
  if (!model || !model->is_object()) tj.fail("model", "missing");
  const auto& mo = model->as_object();
  const json::value* type = mo.if_contains("type");
  const std::string t = type && type->is_string() ? std::string(type->as_string()) : "";
  if (t != "BPE") tj.fail("model.type", "'" + t + "' is not supported (only BPE: byte-level, or SentencePiece-style with byte_fallback)");
  const json::value* bf = mo.if_contains("byte_fallback");
  const bool sentencepiece = bf && bf->is_bool() && bf->as_bool();  // else byte-level BPE
  bool nfc = false;  // Qwen's tokenizers NFC-normalize the text between special tokens first
  if (const json::value* n = tj.find("normalizer"); n && !n->is_null() && !sentencepiece) {
    const json::value* nt = n->is_object() ? n->as_object().if_contains("type") : nullptr;
    if (!nt || !nt->is_string() || nt->as_string() != "NFC")
      tj.fail("normalizer", json::serialize(*n) + " is not supported (only none or NFC)");
    nfc = true;
  }

  // Vocabulary: model.vocab plus added_tokens, dense ids.
  std::map<int64_t, std::pair<std::string, int32_t>> by_id;  // id -> (text, TokenType)
  const json::value* vocab = mo.if_contains("vocab");
  if (!vocab || !vocab->is_object() || vocab->as_object().empty()) tj.fail("model.vocab", "missing or empty");
  for (const auto& [text, id] : vocab->as_object()) {
    if (!id.is_int64() || id.as_int64() < 0 || id.as_int64() >= INT32_MAX)
      tj.fail("model.vocab", "the id of '" + std::string(text) + "' is not a token id");
    if (!by_id.emplace(id.as_int64(), std::pair(std::string(text), 1)).second)
      tj.fail("model.vocab", "id " + std::to_string(id.as_int64()) + " is used twice");
  }
  if (const json::value* added = tj.find("added_tokens")) {
    if (!added->is_array()) tj.fail("added_tokens", "not an array");
    for (const auto& a : added->as_array()) {
      const auto* ao = a.if_object();
      const json::value* id = ao ? ao->if_contains("id") : nullptr;
      const json::value* content = ao ? ao->if_contains("content") : nullptr;
      if (!id || !id->is_int64() || id->as_int64() < 0 || id->as_int64() >= INT32_MAX || !content || !content->is_string())
        tj.fail("added_tokens", "an entry without an id and content");
      const json::value* special = ao->if_contains("special");
      const int32_t kind = special && special->is_bool() && special->as_bool() ? 3 : 4;  // Control : UserDefined
      auto& slot = by_id[id->as_int64()];
      if (!slot.first.empty() && slot.first != content->as_string())
        tj.fail("added_tokens", "id " + std::to_string(id->as_int64()) + " names two different tokens");
      slot = {std::string(content->as_string()), kind};
    }
  }
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (const auto& [id, entry] : by_id) {
    if (id != static_cast<int64_t>(tokens.size()))
      tj.fail("model.vocab", "token ids are not dense: no token has id " + std::to_string(tokens.size()));
    tokens.push_back(entry.first);
    types.push_back(entry.second);
  }

  std::vector<std::pair<std::string, std::string>> merges;
  if (const json::value* mv = mo.if_contains("merges"); mv && !mv->is_null()) {
    if (!mv->is_array()) tj.fail("model.merges", "not an array");
    for (const auto& e : mv->as_array()) {
      const size_t space = e.is_string() ? e.as_string().find(' ') : std::string::npos;
      if (space != std::string::npos) {
        const std::string_view ab = e.as_string();
        merges.emplace_back(ab.substr(0, space), ab.substr(space + 1));
      } else if (e.is_array() && e.as_array().size() == 2 && e.as_array()[0].is_string() && e.as_array()[1].is_string()) {
        merges.emplace_back(e.as_array()[0].as_string(), e.as_array()[1].as_string());
      } else {
        tj.fail("model.merges", "an entry is neither \"a b\" nor [\"a\", \"b\"]");
      }
    }
  }
  if (sentencepiece) {
    m.str("tokenizer.ggml.model", "llama");
    m.boolean("tokenizer.ggml.add_space_prefix", sentencepiece_space_prefix(tj));
    m.f32s("tokenizer.ggml.scores", merge_scores(tj, tokens, merges));
    for (size_t i = 0; i < tokens.size(); ++i)
      if (types[i] == 1 && spm::byte_token_value(tokens[i])) types[i] = 6;
    if (const json::value* unk = mo.if_contains("unk_token"); unk && unk->is_string()) {
      auto it = std::find(tokens.begin(), tokens.end(), unk->as_string());
      if (it == tokens.end()) tj.fail("model.unk_token", "'" + std::string(unk->as_string()) + "' is not in the vocabulary");
      types[it - tokens.begin()] = 2;
      m.u32("tokenizer.ggml.unknown_token_id", it - tokens.begin());
    }
  } else {
    std::vector<std::string> joined;
    for (const auto& [a, b] : merges) joined.push_back(a + " " + b);
    m.str("tokenizer.ggml.model", "gpt2");
    m.str("tokenizer.ggml.pre", pre_tokenizer_family(tj));
    if (nfc) m.str("inferd.tokenizer.normalizer", "NFC");
    m.strings("tokenizer.ggml.merges", joined);
  }
  m.strings("tokenizer.ggml.tokens", tokens);
  m.i32s("tokenizer.ggml.token_type", types);

  // Special tokens and the chat template.
  auto id_of = [&](const JsonFile& f, const std::string& key, const std::string& text) -> int64_t {
    for (size_t i = 0; i < tokens.size(); ++i)
      if (tokens[i] == text) return static_cast<int64_t>(i);
    f.fail(key, "'" + text + "' is not in tokenizer.json's vocabulary");
  };
  std::optional<int64_t> bos, eos;
  bool add_bos = false;
  if (auto tc = read_json(dir + "/tokenizer_config.json", false)) {
    if (auto b = token_content(*tc, "bos_token")) bos = id_of(*tc, "bos_token", *b);
    if (auto e = token_content(*tc, "eos_token")) eos = id_of(*tc, "eos_token", *e);
    if (auto add = tc->get_bool("add_bos_token")) {
      add_bos = *add;
    } else if (bos) {
      // Llama 3 style: tokenizer.json's post-processor puts BOS in front.
      const json::value* pp = tj.find("post_processor");
      add_bos = pp && json::serialize(*pp).find("\"" + tokens[*bos] + "\"") != std::string::npos;
    }
    if (const json::value* ct = tc->find("chat_template")) {
      if (ct->is_string()) {
        m.str("tokenizer.chat_template", std::string(ct->as_string()));
      } else if (ct->is_array()) {
        for (const auto& e : ct->as_array())
          if (const auto* eo = e.if_object(); eo && eo->contains("name") && eo->at("name").is_string() &&
                                               eo->at("name").as_string() == "default" &&
                                               eo->contains("template") && eo->at("template").is_string())
            m.str("tokenizer.chat_template", std::string(eo->at("template").as_string()));
      } else {
        tc->fail("chat_template", "not a string");
      }
    } else if (std::ifstream jinja(dir + "/chat_template.jinja"); jinja) {
      std::stringstream buf;
      buf << jinja.rdbuf();
      m.str("tokenizer.chat_template", buf.str());
    }
  }
  // generation_config.json's eos_token_id (one id or a list) says what ends a
  // generation; the tokenizer takes EOS plus up to two more stop ids.
  std::vector<int64_t> stops;
  if (auto gc = read_json(dir + "/generation_config.json", false)) {
    if (const json::value* e = gc->find("eos_token_id")) {
      std::vector<json::value> ids = e->is_array() ? std::vector<json::value>(e->as_array().begin(), e->as_array().end())
                                                   : std::vector<json::value>{*e};
      for (const auto& v : ids) {
        if (!v.is_int64() || v.as_int64() < 0 || v.as_int64() >= static_cast<int64_t>(tokens.size()))
          gc->fail("eos_token_id", "not a token id of the vocabulary");
        stops.push_back(v.as_int64());
      }
    }
    if (!bos) bos = gc->get_int("bos_token_id");
  }
  if (!eos && !stops.empty()) eos = stops.front();
  if (bos) m.u32("tokenizer.ggml.bos_token_id", *bos);
  if (eos) m.u32("tokenizer.ggml.eos_token_id", *eos);
  const char* extra[] = {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"};
  size_t n_extra = 0;
  for (int64_t s : stops)
    if (s != eos && n_extra < std::size(extra)) m.u32(extra[n_extra++], s);
  m.boolean("tokenizer.ggml.add_bos_token", add_bos);
}

}  // namespace

std::unique_ptr<GgufFile> open_hf_checkpoint(const std::string& dir_in) {
  std::string dir = dir_in;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const auto config = *read_json(dir + "/config.json", true);
  MetadataImage m;
  if (config.get_string("model_type") == "deepseek_v4") {
    // Its own loader reads the weights (engine/models/deepseek_v4.hpp): the
    // image carries what the engine asks before that, and the tokenizer.
    m.str("general.architecture", "deepseek_v4");
    m.u32("deepseek_v4.context_length", config.need_int("max_position_embeddings"));
    m.str("general.name", std::filesystem::path(dir).filename().string());
    read_tokenizer(dir, m);
    return GgufFile::assemble(m.image(), dir, {}, {});
  }
  const Config cfg = read_config(config, m);
  m.str("general.name", std::filesystem::path(dir).filename().string());
  read_tokenizer(dir, m);
  Weights w = read_weights(dir, cfg);
  return GgufFile::assemble(m.image(), dir, std::move(w.tensors), std::move(w.keep));
}

std::vector<std::string> checkpoint_weight_files(const std::string& dir) {
  return checkpoint_shard_names(dir);
}

std::unique_ptr<GgufFile> open_model(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return open_hf_checkpoint(path);
  return GgufFile::open(path);
}

}  // namespace inferd::engine
