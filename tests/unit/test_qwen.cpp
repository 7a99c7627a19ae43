// The Qwen2 and Qwen3 architectures (engine/models/qwen2.cpp and qwen3.cpp: the
// shared decoder with q/k/v projection biases, and with per-head q/k RMSNorm
// and a head width set apart from embedding_length / head_count) on the CPU
// backend, against transformers in float32 on tiny seeded random models
// (tests/golden/qwen2-tiny.gguf, qwen3-tiny.gguf and their goldens, made by
// tools/make_qwen_golden.py): their F16 weights widened to F32 (exact precision)
// give logits within 1e-3 of transformers' and the same argmax at every prompt
// position and the same 16 greedy tokens; as stored (fast precision) within
// 5e-2 and the same greedy tokens. Files missing what the architecture needs
// are refused naming the tensor or key; a sliding window shorter than the
// context caps the context.
#include <doctest/doctest.h>

#include <boost/json.hpp>

#include "engine/gguf_reader.hpp"
#include "engine/tokenizer.hpp"
#include "tests/unit/arch_fixtures.hpp"

using namespace test_golden;

TEST_CASE("Qwen2: the qwen2.* keys configure the shared decoder, RoPE by halves, tied embeddings") {
  Runner r(fixture("qwen2"));
  const auto& mc = r.model->config();
  CHECK(mc.architecture == "qwen2");
  CHECK(mc.n_layers == 2);
  CHECK(mc.dim == 16);
  CHECK(mc.n_heads == 2);
  CHECK(mc.n_kv_heads == 2);
  CHECK(mc.head_dim == 8);
  CHECK(mc.ffn_dim == 64);
  CHECK(mc.vocab == 49152);
  CHECK(mc.max_context == 256);
  CHECK(mc.norm_eps == doctest::Approx(1e-6));
  CHECK(mc.rope.neox);
  CHECK(mc.rope.freq_base == doctest::Approx(1e6));
  CHECK(mc.tied_embeddings);
  CHECK(r.file->find_tensor("output.weight") == nullptr);
  CHECK(r.file->find_tensor("blk.0.attn_q.bias") != nullptr);
}

TEST_CASE("Qwen3: the head width comes from attention.key_length, not embedding_length / head_count") {
  Runner r(fixture("qwen3"));
  const auto& mc = r.model->config();
  CHECK(mc.architecture == "qwen3");
  CHECK(mc.dim == 16);
  CHECK(mc.n_heads == 4);
  CHECK(mc.n_kv_heads == 2);
  CHECK(mc.head_dim == 8);  // 16 / 4 would be 4
  CHECK(mc.rope.neox);
  CHECK(mc.rope.n_rot == 8);
  CHECK(r.file->find_tensor("blk.1.attn_k_norm.weight")->dims == std::vector<int64_t>{8});
}

TEST_CASE("Qwen2: the donor tokenizer in the GGUF gives transformers' ids") {
  const auto file = engine::GgufFile::open(fixture("qwen2"));
  const auto tok = engine::Tokenizer::from_gguf(*file);
  const auto g = golden("qwen2");
  for (const auto& cv : g.at("cases").as_array()) {
    const auto& c = cv.as_object();
    const std::string prompt(c.at("prompt").as_string());
    CAPTURE(prompt);
    CHECK(tok->encode(prompt, true, true) == ints(c.at("ids")));
  }
}

TEST_CASE("Qwen2 and Qwen3: exact precision matches transformers float32") {
  check_golden("qwen2", engine::Precision::Exact, 1e-3);
  check_golden("qwen3", engine::Precision::Exact, 1e-3);
}

TEST_CASE("Qwen2 and Qwen3: fast precision (F16 weights as stored) stays close to transformers") {
  check_golden("qwen2", engine::Precision::Fast, 5e-2);
  check_golden("qwen3", engine::Precision::Fast, 5e-2);
}

TEST_CASE("Qwen2 and Qwen3: a file without the architecture's tensors or with unequal key and value widths is refused") {
  auto refused = [](const Patched& f, const std::string& why) { check_refused(f.path.string(), why); };
  refused(Patched("qwen2", "blk.1.attn_v.bias", "blk.1.attn_v.bia_"), "'blk.1.attn_v.bias' not found");
  refused(Patched("qwen3", "blk.0.attn_q_norm.weight", "blk.0.attn_q_norX.weight"), "'blk.0.attn_q_norm.weight' not found");
  const std::string key = "qwen3.attention.value_length";
  refused(Patched("qwen3", key + u32(4) + u32(8), key + u32(4) + u32(16)),
          "qwen3.attention.value_length 16 differs from the key width");
  // general.architecture: a string (type 8) of 5 bytes.
  const std::string arch_key = "general.architecture" + u32(8) + u32(5) + u32(0);
  refused(Patched("qwen3", arch_key + "qwen3", arch_key + "qwen9"),
          "unsupported architecture 'qwen9' (known: deepseek_v4, gemma2, gemma3, llama, qwen2, qwen3)");
  // Without value_length the values are as wide as the keys.
  const Patched absent("qwen3", key, "qwen3.attention.value_lengtX");
  CHECK(load_error(absent.path.string()) == "(loaded)");
}

TEST_CASE("A sliding window shorter than the context caps the context at the window") {
  const std::string key = "qwen3.attention.sliding_window" + u32(4);  // a u32
  CHECK(Runner(fixture("qwen3")).model->config().max_context == 256);  // the window is the whole context
  {
    const Patched f("qwen3", key + u32(256), key + u32(64));
    CHECK(Runner(f.path.string()).model->config().max_context == 64);
  }
  const Patched zero("qwen3", key + u32(256), key + u32(0));
  CHECK(load_error(zero.path.string()).find("invalid qwen3.attention.sliding_window") != std::string::npos);
}
