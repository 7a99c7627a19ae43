// Hugging Face Qwen2ForCausalLM and Qwen3ForCausalLM checkpoints
// (engine/hf_checkpoint.hpp) on the CPU backend, against transformers in
// float32 on the committed tiny random checkpoints tests/golden/hf-qwen2-tiny
// and hf-qwen3-tiny (goldens hf_qwen2_tiny.json, hf_qwen3_tiny.json, all made
// by tools/make_hf_qwen_golden.py). Their BF16 weights widened to F32 (exact
// precision) give logits within 1e-4 of transformers' (absolute; measured
// 3.3e-6) with the same argmax at every prompt position and the same 16 greedy
// tokens, also after the ChatML rendering of a conversation; as stored (fast
// precision) within 2e-2 (measured 4.0e-3) and the same greedy tokens. The
// tokenizer gives the `tokenizers` library's ids. Unsupported variants fail to
// load naming the file and the key or tensor.
#include <doctest/doctest.h>

#include <algorithm>
#include <boost/json.hpp>
#include <filesystem>

#include "engine/chat_template.hpp"
#include "engine/hf_checkpoint.hpp"
#include "engine/tokenizer.hpp"
#include "tests/unit/golden_runner.hpp"
#include "tests/unit/safetensors_scratch.hpp"
#include "tests/unit/test_paths.hpp"

using namespace inferd;
namespace json = boost::json;
using namespace test_golden;
using test_scratch::read_entries;
using test_scratch::safetensors_bytes;
using test_scratch::StEntry;
using test_scratch::write_text;

namespace {

std::string fixture(const std::string& arch) { return test_paths::source_dir() + "/tests/golden/hf-" + arch + "-tiny"; }
json::object golden(const std::string& arch) {
  return read_golden(test_paths::source_dir() + "/tests/golden/hf_" + arch + "_tiny.json");
}

// A scratch copy of a fixture whose config.json has `from` replaced by `to`.
struct Edited : test_scratch::Scratch {
  Edited(const std::string& arch, const std::string& tag) : Scratch(fixture(arch), "hfq-" + tag) {}
  void config(const std::string& from, const std::string& to) {
    std::string c = read_text(path("config.json"));
    const auto at = c.find(from);
    REQUIRE_MESSAGE(at != std::string::npos, from);
    write_text(path("config.json"), c.replace(at, from.size(), to));
  }
};

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("HF Qwen2 checkpoint: config.json and tensors map onto the qwen2 loader") {
  Runner r(fixture("qwen2"));
  const auto& mc = r.model->config();
  CHECK(mc.architecture == "qwen2");
  CHECK(mc.n_layers == 3);
  CHECK(mc.dim == 64);
  CHECK(mc.n_heads == 4);
  CHECK(mc.n_kv_heads == 2);
  CHECK(mc.head_dim == 16);
  CHECK(mc.ffn_dim == 128);
  CHECK(mc.vocab == 448);  // the embedding is padded past the tokenizer's 405 tokens
  CHECK(mc.max_context == 256);
  CHECK(mc.norm_eps == doctest::Approx(1e-6));
  CHECK(mc.rope.neox);
  CHECK(mc.rope.freq_base == doctest::Approx(1e6));
  CHECK(mc.rope.freq_scale == doctest::Approx(1.0));
  CHECK_FALSE(mc.tied_embeddings);
  CHECK(r.file->tensor("output.weight").dims == std::vector<int64_t>{64, 448});
  CHECK(r.file->tensor("blk.2.attn_k.bias").dims == std::vector<int64_t>{32});
  CHECK(r.file->tensor("blk.2.attn_k.bias").type == kernels::DType::F32);  // widened from BF16
  CHECK(r.file->tensor("blk.0.attn_q.weight").type == kernels::DType::BF16);
}

TEST_CASE("HF Qwen3 checkpoint: config.json and tensors map onto the qwen3 loader") {
  Runner r(fixture("qwen3"));
  const auto& mc = r.model->config();
  CHECK(mc.architecture == "qwen3");
  CHECK(mc.n_layers == 3);
  CHECK(mc.dim == 64);
  CHECK(mc.head_dim == 32);  // config.json's head_dim, not hidden_size / heads
  CHECK(mc.n_kv_heads == 2);
  CHECK(mc.vocab == 405);
  CHECK(mc.rope.freq_base == doctest::Approx(1e6));
  CHECK_FALSE(mc.tied_embeddings);
  CHECK(r.file->tensor("output.weight").dims == std::vector<int64_t>{64, 405});
  CHECK(r.file->tensor("blk.1.attn_q_norm.weight").dims == std::vector<int64_t>{32});
  CHECK(r.file->find_tensor("blk.0.attn_q.bias") == nullptr);
}

TEST_CASE("HF Qwen checkpoints: the tokenizer gives the tokenizers library's ids, ChatML renders as transformers") {
  for (const std::string arch : {"qwen2", "qwen3"}) {
    CAPTURE(arch);
    const auto file = engine::open_model(fixture(arch));
    const auto tok = engine::Tokenizer::from_gguf(*file);
    const auto g = golden(arch);
    CHECK(tok->pre_tokenizer().name() == "qwen2");
    CHECK(tok->vocab_size() == size_t(g.at("tokenizer_vocab").as_int64()));
    CHECK(tok->token_text(tok->eos()) == "<|im_end|>");
    CHECK_FALSE(tok->add_bos());
    auto stops = tok->stop_ids();
    std::sort(stops.begin(), stops.end());
    CHECK(tok->token_text(stops.at(0)) == "<|endoftext|>");  // generation_config.json's second eos_token_id
    CHECK(tok->token_text(stops.at(1)) == "<|im_end|>");
    CHECK(tok->token_type(tok->eos()) == engine::TokenType::Control);
    CHECK(tok->token_type(int32_t(tok->vocab_size()) - 1) == engine::TokenType::UserDefined);  // </think>
    for (const auto& tv : g.at("tokenize").as_array()) {
      const std::string text(tv.at("text").as_string());
      CAPTURE(text);
      CHECK(tok->encode(text, true, true) == ints(tv.at("ids")));
    }
    const auto& chat = g.at("chat").as_object();
    std::vector<engine::ChatMessage> messages;
    for (const auto& m : chat.at("messages").as_array())
      messages.push_back({std::string(m.at("role").as_string()), std::string(m.at("content").as_string())});
    const std::string rendered = engine::ChatTemplate::from_gguf(*file, *tok).apply(messages, true);
    CHECK(rendered == chat.at("rendered").as_string());
    CHECK(tok->encode(rendered, false, true) == ints(chat.at("ids")));
  }
}

TEST_CASE("HF Qwen checkpoints: text between special tokens is NFC-normalized, as the tokenizers library does") {
  // tests/golden/tokenize_nfc.json (tools/make_nfc_golden.py): decomposed
  // accents, singletons (U+212B, U+2126), reordered marks, Hangul jamo; NFKC-only
  // changes (ligatures, fractions) stay.
  const auto file = engine::open_model(fixture("qwen2"));
  const auto tok = engine::Tokenizer::from_gguf(*file);
  const auto g = read_golden(test_paths::source_dir() + "/tests/golden/tokenize_nfc.json");
  for (const auto& tv : g.at("cases").as_array()) {
    const std::string text(tv.at("text").as_string());
    CAPTURE(text);
    CHECK(tok->encode(text, true, true) == ints(tv.at("ids")));
  }
  // A tokenizer.json without a normalizer keeps the bytes it is given.
  const auto plain = engine::Tokenizer::from_gguf(*engine::open_model(test_paths::source_dir() + "/tests/golden/hf-tiny"));
  CHECK(plain->encode("cafe\u0301", false, false) != plain->encode("caf\u00e9", false, false));
  CHECK(plain->decode(plain->encode("cafe\u0301", false, false), false) == "cafe\u0301");
}

TEST_CASE("HF Qwen checkpoints: exact precision matches transformers float32") {
  for (const std::string arch : {"qwen2", "qwen3"}) {
    Runner r(fixture(arch));
    const auto g = golden(arch);
    check_cases(r, g, true, 1e-4, arch + " exact");
    CHECK(r.greedy(ints(g.at("chat").at("ids")), 16) == ints(g.at("chat").at("greedy")));
  }
}

TEST_CASE("HF Qwen checkpoints: fast precision (BF16 weights as stored) stays close to transformers") {
  for (const std::string arch : {"qwen2", "qwen3"}) {
    Runner r(fixture(arch), engine::Precision::Fast);
    check_cases(r, golden(arch), false, 2e-2, arch + " fast");
  }
}

TEST_CASE("HF Qwen checkpoints: unsupported variants are refused naming the file and key or tensor") {
  SUBCASE("Qwen2 without a q_proj bias") {
    Edited s("qwen2", "nobias");
    auto entries = read_entries(fixture("qwen2") + "/model.safetensors");
    std::erase_if(entries, [](const StEntry& e) { return e.name == "model.layers.1.self_attn.q_proj.bias"; });
    write_text(s.path("model.safetensors"), safetensors_bytes(entries));
    const auto e = load_error(s.path());
    CHECK_MESSAGE(has(e, s.path("model.safetensors")), e);
    CHECK_MESSAGE(has(e, "'model.layers.1.self_attn.q_proj.bias' is missing"), e);
  }
  SUBCASE("Qwen2 saying attention_bias false") {
    Edited s("qwen2", "bias-false");
    s.config("\"hidden_act\"", "\"attention_bias\": false,\n  \"hidden_act\"");
    const auto e = load_error(s.path());
    CHECK_MESSAGE(has(e, s.path("config.json")), e);
    CHECK_MESSAGE(has(e, "'attention_bias'"), e);
  }
  SUBCASE("Qwen3 with attention_bias true") {
    Edited s("qwen3", "bias-true");
    s.config("\"attention_bias\": false", "\"attention_bias\": true");
    const auto e = load_error(s.path());
    CHECK_MESSAGE(has(e, s.path("config.json")), e);
    CHECK_MESSAGE(has(e, "'attention_bias'"), e);
  }
  SUBCASE("sliding-window attention") {
    for (const std::string arch : {"qwen2", "qwen3"}) {
      Edited s(arch, "swa");
      s.config("\"use_sliding_window\": false", "\"use_sliding_window\": true");
      const auto e = load_error(s.path());
      CHECK_MESSAGE(has(e, s.path("config.json")), e);
      CHECK_MESSAGE(has(e, "'use_sliding_window'"), e);
    }
  }
  SUBCASE("a sliding layer in layer_types") {
    Edited s("qwen3", "layer-types");
    s.config("\"full_attention\"\n", "\"sliding_attention\"\n");
    const auto e = load_error(s.path());
    CHECK_MESSAGE(has(e, "'layer_types'"), e);
    CHECK_MESSAGE(has(e, "sliding_attention"), e);
  }
  SUBCASE("RoPE scaling other than linear") {
    Edited s("qwen3", "yarn");
    s.config("\"rope_type\": \"default\"", "\"rope_type\": \"yarn\", \"factor\": 4.0");
    const auto e = load_error(s.path());
    CHECK_MESSAGE(has(e, s.path("config.json")), e);
    CHECK_MESSAGE(has(e, "rope_parameters.rope_type"), e);
    CHECK_MESSAGE(has(e, "yarn"), e);
  }
  SUBCASE("linear RoPE scaling is taken") {
    Edited s("qwen2", "linear");
    s.config("\"rope_type\": \"default\"", "\"rope_type\": \"linear\", \"factor\": 2.0");
    Runner r(s.path());
    CHECK(r.model->config().rope.freq_scale == doctest::Approx(0.5));
  }
  SUBCASE("a tensor of another architecture") {
    Edited s("qwen2", "qnorm");
    auto entries = read_entries(fixture("qwen2") + "/model.safetensors");
    entries.push_back({"model.layers.0.self_attn.q_norm.weight", "BF16", {16}, std::string(32, '\0')});
    write_text(s.path("model.safetensors"), safetensors_bytes(entries));
    const auto e = load_error(s.path());
    CHECK_MESSAGE(has(e, s.path("model.safetensors")), e);
    CHECK_MESSAGE(has(e, "'model.layers.0.self_attn.q_norm.weight': not a Qwen2ForCausalLM weight"), e);
  }
  SUBCASE("Qwen3 without a k_norm") {
    Edited s("qwen3", "noknorm");
    auto entries = read_entries(fixture("qwen3") + "/model.safetensors");
    std::erase_if(entries, [](const StEntry& e) { return e.name == "model.layers.2.self_attn.k_norm.weight"; });
    write_text(s.path("model.safetensors"), safetensors_bytes(entries));
    const auto e = load_error(s.path());
    CHECK_MESSAGE(has(e, "'model.layers.2.self_attn.k_norm.weight' is missing"), e);
  }
  SUBCASE("a normalizer other than NFC") {
    Edited s("qwen2", "nfkc");
    std::string t = read_text(s.path("tokenizer.json"));
    const auto at = t.find("\"NFC\"");
    REQUIRE(at != std::string::npos);
    write_text(s.path("tokenizer.json"), t.replace(at, 5, "\"NFKC\""));
    const auto e = load_error(s.path());
    CHECK_MESSAGE(has(e, s.path("tokenizer.json")), e);
    CHECK_MESSAGE(has(e, "'normalizer'"), e);
    CHECK_MESSAGE(has(e, "NFKC"), e);
  }
}
