// Speculative decoding by a draft model (engine/spec/draft_model_proposer.hpp):
// the proposer alone (its drafts are the draft's greedy continuation, also
// after a rejection rolled the sequence back; its cache makes room; a draft of
// another vocabulary is refused), its warm-up touching every key it can reach,
// and the engine producing the greedy tokens it produces without speculation.
#include <doctest/doctest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "engine/engine.hpp"
#include "engine/gguf_reader.hpp"
#include "engine/hf_checkpoint.hpp"
#include "engine/step_heartbeat.hpp"
#include "engine/spec/draft_model_proposer.hpp"
#include "engine/tokenizer.hpp"
#include "kernels/backend.hpp"
#include "kernels/shape_registry.hpp"
#include "tests/engine_generate.hpp"
#include "test_paths.hpp"

using namespace inferd;
using namespace inferd::engine;

namespace {

struct Target {
  std::unique_ptr<GgufFile> file = open_model(test_paths::default_model());
  std::unique_ptr<Tokenizer> tok = Tokenizer::from_gguf(*file);
  std::unique_ptr<kernels::Backend> be = kernels::make_cpu_backend(1);
};

DraftLimits limits(size_t kv_bytes = 8 << 20) { return {256, 64, 16, kv_bytes, Precision::Fast}; }

using test_engine::drafts_for;

}  // namespace

TEST_SUITE("whole_model") {
  TEST_CASE("draft model: drafts continue greedily, also after a rejection rolled the sequence back") {
    Target t;
    DraftModelProposer p({test_paths::default_model(), 4}, *t.be, *t.tok, limits());
    const auto prompt = t.tok->encode("Count from 1 to 20: 1, 2, 3,", true, false);
    const auto d = drafts_for(p, 1, prompt, 4);
    REQUIRE(d.size() == 4);
    // At most num_speculative_tokens, and no more than the room given.
    CHECK(drafts_for(p, 2, prompt, 9).size() == 4);
    CHECK(drafts_for(p, 3, prompt, 2) == std::vector<int32_t>(d.begin(), d.begin() + 2));
    // The target kept the first draft and then said something else: the draft
    // continues from that, exactly as a proposer that never saw the rejected ones.
    auto next = prompt;
    next.push_back(d[0]);
    next.push_back(d[1] == 11 ? 12 : 11);
    DraftModelProposer fresh({test_paths::default_model(), 4}, *t.be, *t.tok, limits());
    CHECK(drafts_for(p, 1, next, 4) == drafts_for(fresh, 7, next, 4));
    // Every draft accepted and the target's token after them.
    auto all = prompt;
    all.insert(all.end(), d.begin(), d.end());
    const auto after = drafts_for(p, 3, all, 4);
    CHECK(after == drafts_for(fresh, 8, all, 4));
    CHECK(p.sequences_held() == 3);
    p.release(2);
    CHECK(p.sequences_held() == 2);
    p.clear();
    CHECK(p.sequences_held() == 0);
    CHECK(drafts_for(p, 1, next, 4) == drafts_for(fresh, 7, next, 4));
  }

  TEST_CASE("draft model: a full cache gives way, the sequence drafted for longest ago first") {
    Target t;
    // 17 blocks of 16: one sequence of max_model_len 256, not two of 150.
    DraftModelProposer p({test_paths::default_model(), 3}, *t.be, *t.tok, limits(0));
    std::vector<int32_t> prompt(150, t.tok->encode("a", false, false).at(0));
    CHECK(drafts_for(p, 1, prompt, 3).size() == 3);
    CHECK(drafts_for(p, 2, prompt, 3).size() == 3);
    CHECK(p.sequences_held() == 1);
    // A sequence that cannot fit even alone drafts nothing and holds nothing.
    std::vector<int32_t> longer(280, prompt[0]);
    CHECK(drafts_for(p, 3, longer, 3).empty());
    CHECK(p.sequences_held() == 0);
  }

  TEST_CASE("draft model: a model of another vocabulary is refused, naming the file") {
    Target t;
    const std::string other = test_paths::source_dir() + "/tests/golden/spm-tiny.gguf";
    std::string what;
    try {
      DraftModelProposer p({other, 4}, *t.be, *t.tok, limits());
    } catch (const std::invalid_argument& e) {
      what = e.what();
    }
    CHECK(what.find("speculative draft model " + other + ": ") == 0);
    CHECK(what.find("a draft needs the target's vocabulary") != std::string::npos);
  }

  TEST_CASE("draft model: its warm-up touches every shape key its forwards can reach") {
    Target t;
    DraftModelProposer p({test_paths::default_model(), 4}, *t.be, *t.tok, limits());
    test_engine::check_warm_covers_its_keys(p, shape_axes(64, 4, 256));
  }

  TEST_CASE("draft model: the engine's greedy output equals decoding one token a step, alone and batched") {
    EngineOptions o = test_engine::small_engine(test_paths::default_model());
    const auto want = test_engine::greedy_baseline(
        o, {"Count from 1 to 300: 1, 2, 3,", "Write a short story about a robot.", "The capital of France is"}, 32);
    const auto& prompts = want.prompts;
    o.speculative = NgramOptions{4, 0, 0};
    o.draft_model = test_paths::default_model();  // the target itself: its drafts are nearly always right
    StepHeartbeat heartbeat;
    Engine eng(o, &heartbeat);
    // The draft's forwards are steps to the heartbeat, and none is left running.
    eng.warm_proposer();
    CHECK(heartbeat.idle());
    for (size_t i = 0; i < prompts.size(); ++i)
      CHECK_MESSAGE(test_engine::generate_greedy(eng, {prompts[i]}, 32)[0].ids == want.alone[i].ids, "prompt ", i);
    const auto st = eng.stats();
    CHECK(st.spec_drafts > 0);
    CHECK(st.spec_accepted_tokens <= st.spec_draft_tokens);
    CHECK(st.spec_accepted_tokens * 10 >= st.spec_draft_tokens * 8);
    REQUIRE(st.spec_accepted_per_pos.size() == 4);
    const auto got = test_engine::generate_greedy(eng, prompts, 32);
    for (size_t i = 0; i < prompts.size(); ++i) CHECK_MESSAGE(got[i].ids == want.batched[i].ids, "prompt ", i, " batched");
    CHECK(heartbeat.steps_completed() > 0);
  }
}
