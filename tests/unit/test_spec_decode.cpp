// Speculative decoding: the scheduler feeding drafts and rolling back the
// rejected ones (with a proposer that says what it is told, no model), and the
// engine on the real model producing the same greedy tokens with and without
// the prompt-lookup proposer, one request at a time and several in one batch.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <numeric>
#include <vector>

#include "engine/engine.hpp"
#include "engine/kv/kv_cache_manager.hpp"
#include "engine/sampler.hpp"
#include "engine/sched/scheduler.hpp"
#include "engine/tokenizer.hpp"
#include "tests/engine_generate.hpp"
#include "test_paths.hpp"

using namespace inferd;
using namespace inferd::engine;

namespace {

// Proposes `drafts` (cut to the room given) for every sequence; remembers the room it was given.
class FixedProposer final : public Proposer {
 public:
  std::vector<int32_t> drafts;
  std::vector<int> rooms;
  void propose(std::span<const DraftRequest> reqs, std::vector<std::vector<int32_t>>& out) override {
    out.clear();
    for (const auto& r : reqs) {
      rooms.push_back(r.max_drafts);
      out.emplace_back(drafts.begin(), drafts.begin() + std::min<size_t>(drafts.size(), r.max_drafts));
    }
  }
};

SeqSpec spec_seq(SeqId id, int prompt_len, int max_tokens = 32) {
  SeqSpec s;
  s.id = id;
  s.prompt.resize(prompt_len);
  std::iota(s.prompt.begin(), s.prompt.end(), 100 + static_cast<int32_t>(id) * 1000);
  s.max_tokens = max_tokens;
  s.stop_tokens = {0};
  s.speculate = true;
  return s;
}

// Runs the plan, answering `tokens` for a sequence with drafts and 7 for the others.
std::vector<TokenOutcome> run(Scheduler& s, const StepPlan& plan, const std::vector<int32_t>& tokens = {7}) {
  std::vector<SampledToken> sampled;
  for (const auto& ss : plan.seqs) {
    if (!ss.sample) continue;
    if (ss.num_drafts == 0) sampled.push_back({ss.seq, 7});
    else
      for (int32_t t : tokens) sampled.push_back({ss.seq, t});
  }
  return s.update(plan, sampled);
}

}  // namespace

TEST_SUITE("speculative decoding") {
  TEST_CASE("scheduler: a decode feeds its drafts; accepted ones stay, rejected ones' blocks go back") {
    KvCacheManager kv(32, 4, true);
    FixedProposer prop;
    prop.drafts = {50, 51, 52};
    Scheduler s({4, 64, 256, 3}, kv, &prop);
    s.add(spec_seq(1, 10));
    run(s, s.schedule());  // the prefill samples 7: 11 tokens, 10 computed
    const StepPlan p = s.schedule();
    REQUIRE(p.seqs.size() == 1);
    const ScheduledSeq& ss = p.seqs[0];
    CHECK(ss.start == 10);
    CHECK(ss.tokens == std::vector<int32_t>{7, 50, 51, 52});
    CHECK(ss.num_drafts == 3);
    CHECK(ss.logits_rows() == 4);
    CHECK_FALSE(p.decode_only());
    CHECK(kv.num_used_blocks() == 4);  // 14 positions
    // 50 accepted, then the target's 60.
    const auto out = run(s, p, {50, 60});
    REQUIRE(out.size() == 2);
    CHECK(out[0].token == 50);
    CHECK(out[1].token == 60);
    CHECK(out[1].sampled_index == 1);
    const auto v = s.view(1);
    CHECK(v.n_computed == 12);  // 10 + its last token + one accepted draft
    CHECK(std::vector<int32_t>(v.tokens.end() - 3, v.tokens.end()) == std::vector<int32_t>{7, 50, 60});
    CHECK(kv.num_used_blocks() == 3);  // 12 positions: the block only drafts 51, 52 used is free
    // The next step starts where the accepted tokens end.
    const StepPlan q = s.schedule();
    REQUIRE(q.seqs.size() == 1);
    CHECK(q.seqs[0].start == 12);
    CHECK(q.seqs[0].tokens.front() == 60);
  }

  TEST_CASE("scheduler: rejected drafts never enter the prefix cache") {
    KvCacheManager kv(32, 4, true);
    FixedProposer prop;
    prop.drafts = {50, 51, 52, 53};
    Scheduler s({8, 64, 256, 4}, kv, &prop);
    s.add(spec_seq(1, 7));
    run(s, s.schedule());  // 8 tokens, 7 computed
    const StepPlan p = s.schedule();
    REQUIRE(p.seqs[0].num_drafts == 4);  // positions 7..11
    run(s, p, {9});                      // none accepted
    CHECK(s.view(1).n_computed == 8);
    CHECK(kv.num_used_blocks() == 2);
    // A prompt that is the first sequence's tokens plus the drafts hits only the
    // two blocks of computed tokens, not the one the drafts were written to.
    std::vector<int32_t> prompt(s.view(1).tokens.begin(), s.view(1).tokens.end() - 1);  // the prompt and 7
    prompt.insert(prompt.end(), {50, 51, 52, 53, 54});
    CHECK(kv.computed_blocks(2, prompt) == 8);
  }

  TEST_CASE("scheduler: a stop token among the accepted ends the sequence there") {
    KvCacheManager kv(32, 4, false);
    FixedProposer prop;
    prop.drafts = {50, 0, 52};
    Scheduler s({4, 64, 256, 3}, kv, &prop);
    s.add(spec_seq(1, 5));
    run(s, s.schedule());
    const auto out = run(s, s.schedule(), {50, 0, 52, 53});
    REQUIRE(out.size() == 2);
    CHECK(out[1].token == 0);
    CHECK(out[1].finish == FinishReason::Stop);
    CHECK_FALSE(s.has(1));
    CHECK(kv.num_used_blocks() == 0);
  }

  TEST_CASE("scheduler: drafts fit the token budget, max_tokens, max_model_len and the logits rows") {
    FixedProposer prop;
    prop.drafts = {50, 51, 52, 53, 54};
    SUBCASE("token budget") {
      KvCacheManager kv(64, 4, false);
      Scheduler s({4, 3, 256, 5}, kv, &prop);
      s.add(spec_seq(1, 3));
      run(s, s.schedule());
      const StepPlan p = s.schedule();
      CHECK(p.num_tokens() <= 3);
      CHECK(p.seqs[0].num_drafts == 2);
    }
    SUBCASE("max_tokens: no draft past the last token the request may have") {
      KvCacheManager kv(64, 4, false);
      Scheduler s({4, 64, 256, 5}, kv, &prop);
      s.add(spec_seq(1, 3, 3));
      run(s, s.schedule());  // 1 generated: room for one draft and the target's token
      CHECK(s.schedule().seqs[0].num_drafts == 1);
    }
    SUBCASE("max_model_len: the last fed position stays below max_model_len - 1") {
      KvCacheManager kv(64, 4, false);
      Scheduler s({4, 64, 12, 5}, kv, &prop);
      s.add(spec_seq(1, 8));
      run(s, s.schedule());  // 9 tokens
      const StepPlan p = s.schedule();
      CHECK(p.seqs[0].num_drafts == 2);
      CHECK(p.seqs[0].start + static_cast<int>(p.seqs[0].tokens.size()) - 1 == 10);
    }
    SUBCASE("logits rows: at most min(max_num_seqs, max_num_batched_tokens), drafts of the newest dropped first") {
      KvCacheManager kv(64, 4, false);
      Scheduler s({4, 64, 256, 5}, kv, &prop);
      s.add(spec_seq(1, 3));
      s.add(spec_seq(2, 3));
      run(s, s.schedule());
      const StepPlan p = s.schedule();
      REQUIRE(p.seqs.size() == 2);
      CHECK(p.num_logits_rows() == 4);
      CHECK(p.seqs[0].num_drafts == 2);
      CHECK(p.seqs[1].num_drafts == 0);
      CHECK(p.seqs[1].tokens.size() == 1);
      CHECK(kv.num_used_blocks() == 2 + 1);  // 6 positions for the first, 4 for the second
    }
    SUBCASE("a sequence that does not speculate feeds no drafts") {
      KvCacheManager kv(64, 4, false);
      Scheduler s({4, 64, 256, 5}, kv, &prop);
      auto sp = spec_seq(1, 3);
      sp.speculate = false;
      s.add(sp);
      run(s, s.schedule());
      CHECK(s.schedule().seqs[0].num_drafts == 0);
    }
  }

  TEST_CASE("draft pace: as many drafts as pay most at the estimated acceptance") {
    DraftPace fresh(5);
    CHECK(fresh.next() == 5);  // a fresh sequence's drafts are assumed kept
    DraftPace none(0);
    CHECK(none.next() == 0);  // no drafts at all
    // Drafts always kept: the most, for as long as they are.
    DraftPace kept(5);
    for (int i = 0; i < 20; ++i) kept.record(5, 5);
    CHECK(kept.acceptance() == doctest::Approx(1.0));
    CHECK(kept.next() == 5);
    // Half of them kept: two drafts give (1 + 1/2 + 1/4) / (1 + 2 kDraftCost)
    // tokens per plain step's time, more than one or three.
    DraftPace half(5);
    for (int i = 0; i < 40; ++i) half.record(2, 1);
    CHECK(half.acceptance() == doctest::Approx(0.5).epsilon(1e-3));
    CHECK(half.next() == 2);
    // It follows the text: a run of kept drafts brings the most back.
    for (int i = 0; i < 20; ++i) half.record(5, 5);
    CHECK(half.next() == 5);
    // A draft that was not reached (after a rejected one) is no evidence.
    DraftPace first(5);
    first.record(5, 0);
    CHECK(first.acceptance() == doctest::Approx(1.0 * DraftPace::kFade / (DraftPace::kFade + 1)));
    first.record(0, 0);  // nothing drafted: nothing learnt
    CHECK(first.acceptance() == doctest::Approx(1.0 * DraftPace::kFade / (DraftPace::kFade + 1)));
  }

  TEST_CASE("draft pace: where no draft pays, pauses that double, each ended by a probe of one") {
    DraftPace pace(5);
    pace.record(5, 0);  // a miss: the estimate falls, one draft still pays
    CHECK(pace.next() == 1);
    pace.record(1, 0);
    CHECK(pace.next() == 1);
    pace.record(1, 0);  // below kDraftCost: a pause of one step, then a probe
    CHECK(pace.acceptance() < DraftPace::kDraftCost);
    CHECK(pace.next() == 0);
    CHECK(pace.next() == 1);
    pace.record(1, 0);  // the probe missed: a pause of two
    CHECK(pace.next() == 0);
    CHECK(pace.next() == 0);
    CHECK(pace.next() == 1);
    pace.record(1, 1);  // the probe kept: drafts again, and the back-off starts over
    CHECK(pace.next() == 1);
    while (pace.acceptance() >= DraftPace::kDraftCost) pace.record(1, 0);
    CHECK(pace.next() == 0);
    CHECK(pace.next() == 1);
    // However long the misses go on, a pause ends within kLongestPause steps.
    for (int i = 0; i < 40; ++i) {
      pace.record(1, 0);
      int paused = 0;
      while (pace.next() == 0) ++paused;
      CHECK(paused <= DraftPace::kLongestPause);
    }
  }

  TEST_CASE("scheduler: a sequence whose drafts are rejected carries fewer, then none for a while") {
    KvCacheManager kv(64, 4, true);
    FixedProposer prop;
    prop.drafts = {50, 51, 52, 53};
    Scheduler s({4, 64, 256, 4}, kv, &prop);
    s.add(spec_seq(1, 10, 100));
    run(s, s.schedule());
    std::vector<int> carried;
    for (int step = 0; step < 7; ++step) {
      const StepPlan p = s.schedule();
      carried.push_back(p.seqs[0].num_drafts);
      run(s, p, {8});  // the target disagrees with the first draft every time
    }
    // 3 drafts (the logits rows allow no more), then 1 while one still pays, a
    // pause of one step, a probe, a pause of two.
    CHECK(carried == std::vector<int>{3, 1, 1, 0, 1, 0, 0});
    // Accepting again grows them back.
    std::vector<int> regrown;
    for (int step = 0; step < 8; ++step) {
      const StepPlan p = s.schedule();
      const int d = p.seqs[0].num_drafts;
      regrown.push_back(d);
      std::vector<int32_t> answer(prop.drafts.begin(), prop.drafts.begin() + d);
      answer.push_back(8);
      run(s, p, answer);
    }
    CHECK(regrown.front() == 1);  // the probe
    CHECK(regrown.back() == 3);
    CHECK(std::is_sorted(regrown.begin(), regrown.end()));
  }
}

namespace {

EngineOptions engine_options(bool speculate) {
  EngineOptions o = test_engine::small_engine(test_paths::default_model());
  if (speculate) o.speculative = NgramOptions{5, 2, 4};
  return o;
}

}  // namespace

TEST_CASE("speculative decoding: greedy output equals decoding one token a step, alone and batched" * doctest::test_suite("whole_model")) {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<test_engine::Generated> want_alone, want_batch;
  {
    Engine plain(engine_options(false));
    const auto& tok = plain.tokenizer();
    for (const char* text : {"Count from 1 to 300: 1, 2, 3,", "a b c d e f g a b c d e f g a b c",
                             "The cat sat on the mat. The cat sat on the mat. The cat",
                             "Write a short story about a robot."})
      prompts.push_back(tok.encode(text, true, false));
    // Prefilled in chunks of 64 while the others decode with drafts.
    std::string numbers;
    for (int i = 1; i <= 50; ++i) numbers += std::to_string(i) + ", ";
    prompts.push_back(tok.encode(numbers, true, false));
    REQUIRE(prompts.back().size() > 128);
    REQUIRE(prompts.back().size() < 200);
    for (const auto& p : prompts) want_alone.push_back(test_engine::generate_greedy(plain, {p}, 40)[0]);
    want_batch = test_engine::generate_greedy(plain, prompts, 40);
  }
  Engine eng(engine_options(true));
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto got = test_engine::generate_greedy(eng, {prompts[i]}, 40)[0];
    CHECK_MESSAGE(got.ids == want_alone[i].ids, "prompt ", i, " alone");
    CHECK(got.ids.size() == 40);
  }
  const auto st = eng.stats();
  CHECK(st.spec_drafts > 0);
  CHECK(st.spec_accepted_tokens > 0);  // counting and the repeated sentence are predictable
  CHECK(st.spec_accepted_tokens <= st.spec_draft_tokens);
  REQUIRE(st.spec_accepted_per_pos.size() == 5);
  for (size_t i = 1; i < 5; ++i) CHECK(st.spec_accepted_per_pos[i] <= st.spec_accepted_per_pos[i - 1]);
  // Fewer steps than tokens: accepted drafts came out of the same step.
  const auto got = test_engine::generate_greedy(eng, prompts, 40);
  for (size_t i = 0; i < prompts.size(); ++i) CHECK_MESSAGE(got[i].ids == want_batch[i].ids, "prompt ", i, " batched");
}

TEST_CASE("sampler: verifying a draft keeps the sampling distribution (speculative sampling, point-mass proposal)") {
  // Four tokens with probabilities 0.5, 0.25, 0.125, 0.125 at temperature 1.
  const std::vector<float> logits{std::log(4.0f), std::log(2.0f), 0.0f, 0.0f};
  SamplingParams params;
  params.temperature = 1.0f;
  params.seed = 7;
  const std::vector<double> p{0.5, 0.25, 0.125, 0.125};
  for (int32_t draft : {0, 1, 3}) {
    Sampler s(params);
    std::vector<int> counts(4, 0);
    int accepted = 0;
    constexpr int kTrials = 40000;
    for (int i = 0; i < kTrials; ++i) {
      std::vector<float> l = logits;
      const int32_t t = s.verify(l, {}, {}, draft).token;
      ++counts[static_cast<size_t>(t)];
      accepted += t == draft;
    }
    INFO("draft ", draft);
    // Accepted with probability p(draft), and every token drawn with p overall
    // (the standard error at 40000 draws is at most 0.0025).
    CHECK(std::abs(double(accepted) / kTrials - p[static_cast<size_t>(draft)]) < 0.015);
    for (size_t t = 0; t < 4; ++t) CHECK(std::abs(double(counts[t]) / kTrials - p[t]) < 0.015);
  }
  // A draft truncation dropped (top_k 1 keeps token 0 only) is never accepted.
  params.top_k = 1;
  Sampler s(params);
  for (int i = 0; i < 100; ++i) {
    std::vector<float> l = logits;
    CHECK(s.verify(l, {}, {}, 2).token == 0);
  }
  // Greedy: the argmax, whatever the draft.
  params = SamplingParams{};
  params.temperature = 0;
  Sampler g(params);
  std::vector<float> l = logits;
  CHECK(g.verify(l, {}, {}, 1).token == 0);
}

TEST_CASE("speculative decoding: sampled requests speculate too, and end with their max_tokens") {
  Engine eng(engine_options(true));
  const auto prompt = eng.tokenizer().encode("Count from 1 to 300: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,", true, false);
  std::mutex mu;
  std::condition_variable cv;
  int done = 0, tokens = 0;
  for (int i = 0; i < 3; ++i) {
    GenerationRequest r;
    r.prompt = prompt;
    r.sampling.temperature = 0.3f;
    r.sampling.seed = i;
    r.max_tokens = 60;
    r.ignore_eos = true;
    r.sink = [&](Delta&& d) {
      std::lock_guard lk(mu);
      tokens += static_cast<int>(d.tokens.size());
      if (d.finish != FinishReason::None) {
        CHECK(d.finish == FinishReason::Length);
        CHECK(d.usage.completion_tokens == 60);
        ++done;
        cv.notify_all();
      }
    };
    eng.submit(std::move(r));
  }
  std::unique_lock lk(mu);
  test_engine::wait_finished(eng, lk, cv, [&] { return done == 3; });
  CHECK(tokens == 180);
  const auto st = eng.stats();
  CHECK(st.spec_drafts > 0);
  CHECK(st.spec_accepted_tokens > 0);
  CHECK(st.spec_accepted_tokens <= st.spec_draft_tokens);
}
