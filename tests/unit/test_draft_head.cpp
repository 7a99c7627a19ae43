// Speculative decoding by a draft head (engine/spec/draft_head_proposer.hpp):
// the head reads the feature the target hands it and drafts through the
// target's own output head; it is refused for another model; its warm-up
// touches every key it can reach; and the engine, handing it each step's
// features, produces the greedy tokens it produces without speculation.
//
// The head here is the identity (f[t+1] = f[t]): it drafts, again and again,
// the token the observed feature gives, which is the sequence's newest token
// when the engine hands it the right feature.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/engine.hpp"
#include "engine/gguf_reader.hpp"
#include "engine/hf_checkpoint.hpp"
#include "engine/kv/kv_cache.hpp"
#include "engine/models/model_registry.hpp"
#include "engine/spec/draft_head_proposer.hpp"
#include "engine/tokenizer.hpp"
#include "kernels/backend.hpp"
#include "kernels/shape_registry.hpp"
#include "tests/engine_generate.hpp"
#include "test_paths.hpp"
#include "gguf_writer.hpp"

using namespace inferd;
using namespace inferd::engine;

namespace {

struct HeadSpec {
  int dim = 0, vocab = 0, ffn = 8;
  uint32_t fingerprint = 0;
  std::string architecture = "draft_head";
  std::vector<int32_t> drafts;  // the ids it drafts; empty: every id
};

// An identity head (W_f = I, everything else zero) for a model of `s`'s shape, as a file.
std::string write_head(const HeadSpec& s, const std::string& name) {
  const auto D = static_cast<uint64_t>(s.dim), H = static_cast<uint64_t>(s.ffn);
  struct T {
    const char* name;
    std::vector<uint64_t> dims;  // GGUF order: the row length first
  };
  const std::vector<T> tensors = {{"draft_head.fc_feature.weight", {D, D}}, {"draft_head.fc_token.weight", {D, D}},
                                  {"draft_head.fc.bias", {D}},              {"draft_head.ffn_gate.weight", {D, H}},
                                  {"draft_head.ffn_up.weight", {D, H}},      {"draft_head.ffn_down.weight", {H, D}}};
  GgufWriter w;
  w.header(tensors.size(), 6).kv_str("general.architecture", s.architecture);
  std::vector<int32_t> ids = s.drafts;
  if (ids.empty())
    for (int32_t i = 0; i < s.vocab; ++i) ids.push_back(i);
  w.key("draft_head.draft_ids", GgufType::ARRAY).u32(static_cast<uint32_t>(GgufType::I32)).u64(ids.size());
  for (int32_t id : ids) w.put(id);
  w.kv_u32("draft_head.dim", static_cast<uint32_t>(s.dim)).kv_u32("draft_head.vocab", static_cast<uint32_t>(s.vocab));
  w.kv_u32("draft_head.ffn_dim", static_cast<uint32_t>(s.ffn)).kv_u32("draft_head.embedding_crc32", s.fingerprint);
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    w.tensor(t.name, t.dims, kernels::DType::F32, offset);
    uint64_t n = 1;
    for (auto d : t.dims) n *= d;
    offset += (n * sizeof(float) + 31) / 32 * 32;
  }
  w.align(32);
  for (const auto& t : tensors) {
    uint64_t n = 1;
    for (auto d : t.dims) n *= d;
    std::vector<float> data(n, 0.0f);
    if (std::string(t.name) == "draft_head.fc_feature.weight")
      for (uint64_t i = 0; i < D; ++i) data[i * D + i] = 1.0f;
    w.b.insert(w.b.end(), reinterpret_cast<const uint8_t*>(data.data()),
               reinterpret_cast<const uint8_t*>(data.data() + n));
    w.align(32);
  }
  const auto path = (std::filesystem::temp_directory_path() / name).string();
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(w.b.data()), std::streamsize(w.b.size()));
  return path;
}

struct Target {
  std::unique_ptr<GgufFile> file = open_model(test_paths::default_model());
  std::unique_ptr<kernels::Backend> be = kernels::make_cpu_backend(1);
  std::unique_ptr<Model> model = load_model(*file, *be);
  HeadSpec spec() const { return {model->config().dim, model->config().vocab, 8, draft_head_fingerprint(*file)}; }
};

using test_engine::drafts_for;

}  // namespace

TEST_SUITE("whole_model") {
  TEST_CASE("draft head: drafts through the target's output head from the feature it was handed") {
    Target t;
    const auto& mc = t.model->config();
    DraftHeadProposer p({write_head(t.spec(), "identity-head.gguf"), 3}, *t.be, *t.model, *t.file);
    // The prompt's forward, with the last position's logits and feature.
    const std::vector<int32_t> prompt = {1, 504, 3458, 282, 4649, 314};
    KvCache kv(KvGeometry{mc.n_layers, mc.n_kv_heads, mc.head_dim, 16, 1}, *t.be);
    StepBatch b;
    const std::vector<int32_t> table = {0};
    const int32_t at = b.add_table(table);
    for (size_t i = 0; i < prompt.size(); ++i) b.add(prompt[i], int32_t(i), at, i + 1 == prompt.size());
    std::vector<float> logits(static_cast<size_t>(mc.vocab)), feature(static_cast<size_t>(mc.dim));
    t.model->forward(b, kv, logits.data(), nullptr, feature.data());
    const auto next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());

    std::vector<int32_t> tokens = prompt;
    tokens.push_back(next);
    p.observe(7, tokens.size(), feature);
    CHECK(drafts_for(p, 7, tokens, 3) == std::vector<int32_t>{next, next, next});
    CHECK(drafts_for(p, 7, tokens, 2).size() == 2);  // no more than the step has room for
    // A feature behind the sequence's newest token gives nothing, nor does an unknown sequence.
    tokens.push_back(next);
    CHECK(drafts_for(p, 7, tokens, 3).empty());
    CHECK(drafts_for(p, 8, tokens, 3).empty());
    tokens.pop_back();
    p.release(7);
    CHECK(drafts_for(p, 7, tokens, 3).empty());
    CHECK(p.sequences_held() == 0);

    // A head's own vocabulary: it drafts the best of its ids, by the target's logits.
    HeadSpec few = t.spec();
    few.drafts = {5, 6, 7, 9};
    DraftHeadProposer q({write_head(few, "few-ids-head.gguf"), 2}, *t.be, *t.model, *t.file);
    q.observe(1, tokens.size(), feature);
    const int32_t best = *std::max_element(few.drafts.begin(), few.drafts.end(),
                                           [&](int32_t a, int32_t b) { return logits[size_t(a)] < logits[size_t(b)]; });
    CHECK(drafts_for(q, 1, tokens, 2) == std::vector<int32_t>{best, best});
  }

  TEST_CASE("draft head: beside prompt lookup, each sequence takes the source whose drafts it keeps") {
    Target t;
    const auto& mc = t.model->config();
    DraftHeadOptions o{write_head(t.spec(), "identity-head.gguf"), 3};
    o.lookup = NgramOptions{3, 1, 2};
    DraftHeadProposer p(o, *t.be, *t.model, *t.file);
    // Any feature: the identity head drafts its argmax, whatever the tokens.
    std::vector<float> feature(static_cast<size_t>(mc.dim));
    for (size_t i = 0; i < feature.size(); ++i) feature[i] = std::sin(0.37f * float(i));
    p.observe(1, 0, feature);
    const auto head = drafts_for(p, 1, {}, 0);  // nothing asked, nothing given
    CHECK(head.empty());
    std::vector<int32_t> tokens = {10, 11, 12, 13, 10, 11};
    p.observe(1, tokens.size(), feature);
    // The text repeats: lookup drafts first (both sources untried).
    CHECK(drafts_for(p, 1, tokens, 3) == std::vector<int32_t>{12, 13, 10});
    // None kept: its rate falls below the head's, whose drafts come next,
    // though lookup still finds the newest token earlier.
    tokens.push_back(10);
    p.observe(1, tokens.size(), feature);
    const auto drafts = drafts_for(p, 1, tokens, 3);
    REQUIRE(drafts.size() == 3);
    CHECK(drafts[0] == drafts[1]);
    CHECK(drafts[1] == drafts[2]);
    // The head's drafts all rejected twice: lookup, at a tie or better, drafts again.
    for (int round = 0; round < 2; ++round) {
      tokens.push_back(drafts[0] + 1);
      p.observe(1, tokens.size(), feature);
      if (round == 0) CHECK(drafts_for(p, 1, tokens, 3) == drafts);
    }
    tokens = {10, 11, 12, 13, 10, 11};
    p.observe(1, tokens.size(), feature);
    CHECK(drafts_for(p, 1, tokens, 3) == std::vector<int32_t>{12, 13, 10});
  }

  TEST_CASE("draft head: a head for another model, or not a head, is refused naming the file") {
    Target t;
    auto refused = [&](const HeadSpec& s, const std::string& why) {
      const auto path = write_head(s, "bad-head.gguf");
      std::string what;
      try {
        DraftHeadProposer p({path, 3}, *t.be, *t.model, *t.file);
      } catch (const std::exception& e) {
        what = e.what();
      }
      CHECK_MESSAGE(what.find(path) != std::string::npos, what);
      CHECK_MESSAGE(what.find(why) != std::string::npos, what);
    };
    HeadSpec other = t.spec();
    other.fingerprint ^= 1;
    refused(other, "it was trained for another model");
    HeadSpec narrow = t.spec();
    narrow.dim = 64;
    refused(narrow, "it is for a model of width 64");
    HeadSpec model = t.spec();
    model.architecture = "llama";
    refused(model, "general.architecture is 'llama', not 'draft_head'");
    HeadSpec beyond = t.spec();
    beyond.drafts = {1, beyond.vocab};
    refused(beyond, "draft_head.draft_ids names id " + std::to_string(beyond.vocab));
  }

  TEST_CASE("draft head: its warm-up touches every shape key it can reach") {
    Target t;
    DraftHeadProposer p({write_head(t.spec(), "identity-head.gguf"), 3}, *t.be, *t.model, *t.file);
    test_engine::check_warm_covers_its_keys(p, shape_axes(64, 4, 256));
  }

  TEST_CASE("draft head: the engine's greedy output equals decoding one token a step, alone and batched") {
    EngineOptions o = test_engine::small_engine(test_paths::default_model());
    const auto want = test_engine::greedy_baseline(
        o, {"Count from 1 to 300: 1, 2, 3,", "yes yes yes yes yes yes yes yes yes yes", "The capital of France is"}, 32);
    const auto& prompts = want.prompts;
    Target t;
    o.speculative = NgramOptions{3, 0, 0};
    o.draft_head = write_head(t.spec(), "identity-head.gguf");
    Engine eng(o);
    eng.warm_proposer();
    for (size_t i = 0; i < prompts.size(); ++i)
      CHECK_MESSAGE(test_engine::generate_greedy(eng, {prompts[i]}, 32)[0].ids == want.alone[i].ids, "prompt ", i);
    const auto st = eng.stats();
    // Every step after a sequence's first drafts: the engine handed the head
    // the feature of the sequence's newest token every time.
    CHECK(st.spec_drafts > 0);
    CHECK(st.spec_draft_tokens <= st.spec_drafts * 3);
    CHECK(st.spec_accepted_tokens <= st.spec_draft_tokens);
    // The repeating prompt goes on repeating: drafts of its newest token are taken.
    CHECK(st.spec_accepted_tokens > 0);
    const auto got = test_engine::generate_greedy(eng, prompts, 32);
    for (size_t i = 0; i < prompts.size(); ++i) CHECK_MESSAGE(got[i].ids == want.batched[i].ids, "prompt ", i, " batched");
  }

  TEST_CASE("draft head: after a step that kept drafts, the head reads the feature of the step's last kept row") {
    // The model continues this with pairs and a single (ids 1892 1892 1792 1792
    // 329 ...). The first of a pair is never a draft of the identity head (it
    // differs from the token before it), so a step ends on it, and the head,
    // handed that row's feature, drafts it again: the pair's second token is
    // kept. Handed the step's first row instead (the row before its kept
    // drafts), it drafts an older token: 2 of 16 repeats were kept that way.
    EngineOptions o = test_engine::small_engine(test_paths::default_model());
    Target t;
    o.speculative = NgramOptions{3, 0, 0};
    o.draft_head = write_head(t.spec(), "identity-head.gguf");
    Engine eng(o);
    const auto prompt = eng.tokenizer().encode("x x y y z z x x y y z z x x y y", true, false);
    const auto got = test_engine::generate_greedy(eng, {prompt}, 40)[0].ids;
    uint64_t repeats = 0;  // generated tokens equal to the one before them
    for (size_t i = 0; i < got.size(); ++i) repeats += got[i] == (i ? got[i - 1] : prompt.back());
    // Pairs: a repeat of a token that was not itself a repeat. Inside a longer
    // run every row drafts the repeat, so only pairs tell the rows apart.
    uint64_t pairs = 0;
    for (size_t i = 1; i < got.size(); ++i) pairs += got[i] == got[i - 1] && (i < 2 || got[i - 1] != got[i - 2]);
    const auto st = eng.stats();
    MESSAGE(repeats << " repeats (" << pairs << " pairs), " << st.spec_accepted_tokens << " drafts kept");
    CHECK(st.spec_accepted_tokens <= repeats);  // the identity head only ever drafts a repeat
    // The int8 kernels' rounding decides the text: with AVX-512 VNNI the model
    // answers in pairs; with AVX2 (and the scalar kernels) it falls into one long
    // run after three pairs, where both rows are kept alike (23 and 22 of 35).
    if (pairs >= 10)
      CHECK(st.spec_accepted_tokens * 4 >= repeats * 3);
    else
      MESSAGE("the model's text here has " << pairs << " pairs: the row the head reads is not told apart");
  }
}
