// The Gemma 2 and Gemma 3 architectures (engine/models/gemma2.cpp: the shared
// decoder with scaled token embeddings, norms after each block as well as
// before, a GELU-gated feed-forward, soft-capped attention scores and logits,
// and a sliding window on the even layers; gemma3.cpp: no caps, per-head q/k
// norms, five local layers to a global one, the local layers' own RoPE base) on
// the CPU backend, against transformers' Gemma2ForCausalLM / Gemma3ForCausalLM
// in float32 on tiny seeded random models (tests/golden/gemma2-tiny.gguf,
// gemma3-tiny.gguf and their goldens, made by tools/make_gemma_golden.py) whose
// window (8) is shorter than their prompts and whose caps bind: exact precision
// within 1e-3 with the same argmax at every prompt position and the same 16
// greedy tokens, fast precision within 5e-2 and the same greedy tokens. The
// window, the caps and the global layers' RoPE scaling are each shown to matter
// (the file with it changed misses the golden), and files missing what the
// architecture needs, or a backend without its ops, are refused at load naming
// what is missing.
#include <doctest/doctest.h>

#include <boost/json.hpp>

#include "engine/chat_template.hpp"
#include "engine/gguf_reader.hpp"
#include "engine/tokenizer.hpp"
#include "tests/unit/arch_fixtures.hpp"
#include "tests/unit/capturing_backend.hpp"

using namespace test_golden;

namespace {

// A little-endian f32 as the file holds it.
std::string f32(float v) { return std::string(reinterpret_cast<const char*>(&v), 4); }

// Max |logit diff| against ARCH's golden over its cases, for a (patched) ARCH file.
double worst_against_golden(const std::string& arch, const std::string& path) {
  Runner r(path);
  const auto g = golden(arch);
  double worst = 0;
  for (const auto& c : g.at("cases").as_array())
    worst = std::max(worst, compare(r, c.as_object(), g.at("probes").as_array(), false));
  return worst;
}

const std::string kAttnCap = "gemma2.attn_logit_softcapping" + u32(6);  // an f32
const std::string kFinalCap = "gemma2.final_logit_softcapping" + u32(6);
const std::string kWindow = "gemma2.attention.sliding_window" + u32(4);  // a u32
const std::string kWindow3 = "gemma3.attention.sliding_window" + u32(4);
const std::string kRopeFactor3 = "gemma3.rope.scaling.factor" + u32(6);

}  // namespace

TEST_CASE("Gemma 2: the gemma2.* keys configure the shared decoder; the window does not cap the context") {
  Runner r(fixture("gemma2"));
  const auto& mc = r.model->config();
  CHECK(mc.architecture == "gemma2");
  CHECK(mc.n_layers == 2);
  CHECK(mc.dim == 16);
  CHECK(mc.n_heads == 2);
  CHECK(mc.n_kv_heads == 1);
  CHECK(mc.head_dim == 16);  // 16 / 2 would be 8
  CHECK(mc.ffn_dim == 32);
  CHECK(mc.vocab == 256);
  CHECK(mc.max_context == 256);  // a window of 8 on the local layers only
  CHECK(mc.rope.neox);
  CHECK(mc.tied_embeddings);
}

TEST_CASE("Gemma 3: q/k norms, six layers, the global layers' RoPE base and linear scaling from the file") {
  Runner r(fixture("gemma3"));
  const auto& mc = r.model->config();
  CHECK(mc.architecture == "gemma3");
  CHECK(mc.n_layers == 6);
  CHECK(mc.head_dim == 16);
  CHECK(mc.max_context == 256);
  CHECK(mc.rope.freq_base == doctest::Approx(1e6));
  CHECK(mc.rope.freq_scale == doctest::Approx(0.5));
  CHECK(r.file->find_tensor("blk.5.attn_q_norm.weight") != nullptr);
}

TEST_CASE("Gemma 2 and Gemma 3: exact precision matches transformers float32") {
  check_golden("gemma2", engine::Precision::Exact, 1e-3);
  check_golden("gemma3", engine::Precision::Exact, 1e-3);
}

TEST_CASE("Gemma 2 and Gemma 3: fast precision (F16 weights as stored, F16 cache) stays close to transformers") {
  check_golden("gemma2", engine::Precision::Fast, 5e-2);
  check_golden("gemma3", engine::Precision::Fast, 5e-2);
}

TEST_CASE("Gemma 2: the sliding window and both soft caps change the answers the golden checks") {
  CHECK(worst_against_golden("gemma2", fixture("gemma2")) < 1e-3);
  const Patched window("gemma2", kWindow + u32(8), kWindow + u32(256));
  CHECK(worst_against_golden("gemma2", window.path.string()) > 0.1);
  const Patched attn_cap("gemma2", kAttnCap + f32(2.0f), kAttnCap + f32(50.0f));
  CHECK(worst_against_golden("gemma2", attn_cap.path.string()) > 0.1);
  const Patched final_cap("gemma2", kFinalCap + f32(15.0f), kFinalCap + f32(30.0f));
  CHECK(worst_against_golden("gemma2", final_cap.path.string()) > 0.1);
  // Without the keys the caps are Gemma 2's own, 50 and 30: the file loads.
  const Patched no_cap("gemma2", "gemma2.final_logit_softcapping", "gemma2.final_logit_softcappinX");
  CHECK(load_error(no_cap.path.string()) == "(loaded)");
}

TEST_CASE("Gemma 3: the sliding window and the global layers' RoPE scaling change the answers the golden checks") {
  CHECK(worst_against_golden("gemma3", fixture("gemma3")) < 1e-3);
  const Patched window("gemma3", kWindow3 + u32(8), kWindow3 + u32(256));
  CHECK(worst_against_golden("gemma3", window.path.string()) > 0.1);
  const Patched factor("gemma3", kRopeFactor3 + f32(2.0f), kRopeFactor3 + f32(1.0f));
  CHECK(worst_against_golden("gemma3", factor.path.string()) > 0.1);
}

TEST_CASE("Gemma 2 and 3: a file without its norms, its window or with a negative cap, or a backend without the ops, is refused") {
  const Patched norm("gemma2", "blk.1.post_ffw_norm.weight", "blk.1.post_ffw_norX.weight");
  check_refused(norm.path.string(), "'blk.1.post_ffw_norm.weight' not found");
  const Patched window("gemma2", "gemma2.attention.sliding_window", "gemma2.attention.sliding_windoX");
  check_refused(window.path.string(), "missing gemma2.attention.sliding_window");
  const Patched cap("gemma2", kAttnCap + f32(2.0f), kAttnCap + f32(-2.0f));
  check_refused(cap.path.string(), "invalid gemma2.attn_logit_softcapping");
  const Patched q_norm("gemma3", "blk.0.attn_q_norm.weight", "blk.0.attn_q_norX.weight");
  check_refused(q_norm.path.string(), "'blk.0.attn_q_norm.weight' not found");
  test_capture::CapturingBackend capturing;  // as a backend without the ops (CUDA today)
  check_refused(fixture("gemma2"), "architecture 'gemma2' needs ops the capturing backend does not have", &capturing);
  check_refused(fixture("gemma3"), "architecture 'gemma3' needs ops the capturing backend does not have", &capturing);
}

// tests/golden/gemma2-chat.gguf (tools/make_gemma_chat_fixture.py): a Gemma-style
// SentencePiece vocabulary (no space prefix; <bos> id 2, turn markers control
// tokens) and Gemma's own chat template, against llama.cpp's llama-tokenize
// and jinja2 rendering as transformers renders it.
TEST_CASE("Gemma's tokenizer and chat template: llama.cpp's ids, transformers' prompts and refusals") {
  const std::string dir = test_paths::source_dir() + "/tests/golden/";
  const auto file = engine::GgufFile::open(dir + "gemma2-chat.gguf");
  const auto tok = engine::Tokenizer::from_gguf(*file);
  CHECK(tok->model() == engine::TokenizerModel::SentencePiece);
  CHECK(tok->token_text(tok->bos()) == "<bos>");
  CHECK(tok->token_type(*tok->find("<start_of_turn>")) == engine::TokenType::Control);
  const auto g = read_golden(dir + "gemma_chat.json");
  for (const auto& tv : g.at("tokenize").as_array()) {
    const std::string text(tv.at("text").as_string());
    CAPTURE(text);
    CHECK(tok->encode(text, false, true) == ints(tv.at("ids")));
  }
  const auto chat = engine::ChatTemplate::from_gguf(*file, *tok);
  for (const auto& c : g.at("chats").as_array()) {
    std::vector<engine::ChatMessage> messages;
    for (const auto& m : c.at("messages").as_array())
      messages.push_back({std::string(m.at("role").as_string()), std::string(m.at("content").as_string())});
    CAPTURE(messages.size());
    if (const auto* error = c.as_object().if_contains("error")) {
      const std::string want(error->as_string());
      CHECK_THROWS_WITH_AS(chat.apply(messages, true), doctest::Contains(want.c_str()), engine::ChatTemplateError);
      continue;
    }
    CHECK(chat.apply(messages, true) == c.at("rendered").as_string());
    CHECK(chat.encode(*tok, messages, true) == ints(c.at("ids")));  // <bos> from the template, as chat requests add none
  }
}
