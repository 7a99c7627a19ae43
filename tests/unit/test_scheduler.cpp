// The scheduler with no model: each step is planned, "run" by feeding back a
// token for every sequence the plan samples, and the plans are checked —
// decode first, chunked prefill within the token budget, max_num_seqs,
// preemption under block pressure, arrival order, stops, aborts, prefix reuse.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "engine/kv/kv_cache_manager.hpp"
#include "engine/sched/scheduler.hpp"

using namespace inferd::engine;

namespace {

SeqSpec spec(SeqId id, int prompt_len, int max_tokens = 16, int32_t first = 1) {
  SeqSpec s;
  s.id = id;
  s.prompt.resize(prompt_len);
  std::iota(s.prompt.begin(), s.prompt.end(), first + static_cast<int32_t>(id) * 1000);
  s.max_tokens = max_tokens;
  s.stop_tokens = {0};
  return s;
}

// Samples `token` for every sequence the plan asks for.
std::vector<TokenOutcome> run(Scheduler& s, const StepPlan& plan, int32_t token = 7) {
  std::vector<SampledToken> sampled;
  for (const auto& ss : plan.seqs)
    if (ss.sample) sampled.push_back({ss.seq, token});
  return s.update(plan, sampled);
}

const ScheduledSeq* find(const StepPlan& p, SeqId id) {
  for (const auto& s : p.seqs)
    if (s.seq == id) return &s;
  return nullptr;
}

std::vector<SeqId> ids(const StepPlan& p) {
  std::vector<SeqId> v;
  for (const auto& s : p.seqs) v.push_back(s.seq);
  return v;
}

}  // namespace

TEST_SUITE("scheduler") {
  TEST_CASE("a long prompt is prefilled in chunks within max_num_batched_tokens, sampled only at its end") {
    KvCacheManager kv(64, 16, false);
    Scheduler s({4, 32, 1024}, kv);
    s.add(spec(1, 100));
    std::vector<int> chunks;
    for (int i = 0; i < 4; ++i) {
      const StepPlan p = s.schedule();
      REQUIRE(p.seqs.size() == 1);
      const auto& ss = p.seqs[0];
      CHECK(ss.start == 32 * i);
      CHECK(ss.sample == (i == 3));
      CHECK(ss.block_table.size() * 16 >= static_cast<size_t>(ss.start) + ss.tokens.size());
      CHECK(p.num_tokens() <= 32);
      chunks.push_back(static_cast<int>(ss.tokens.size()));
      run(s, p);
    }
    CHECK(chunks == std::vector<int>{32, 32, 32, 4});
    const auto v = s.view(1);
    CHECK(v.tokens.size() == 101);
    CHECK(v.n_computed == 100);
    const StepPlan d = s.schedule();  // now a decode of the sampled token at position 100
    REQUIRE(d.seqs.size() == 1);
    CHECK(d.seqs[0].start == 100);
    CHECK(d.seqs[0].tokens == std::vector<int32_t>{7});
    CHECK(d.decode_only());
  }

  TEST_CASE("decode tokens come before prefill chunks, and the budget caps the chunk") {
    KvCacheManager kv(64, 16, false);
    Scheduler s({4, 20, 1024}, kv);
    s.add(spec(1, 4));
    s.add(spec(2, 4));
    run(s, s.schedule());  // both prefilled and sampled
    s.add(spec(3, 50));
    const StepPlan p = s.schedule();
    CHECK(ids(p) == std::vector<SeqId>{1, 2, 3});
    CHECK(p.seqs[0].tokens.size() == 1);
    CHECK(p.seqs[1].tokens.size() == 1);
    CHECK(p.seqs[2].tokens.size() == 18);  // what the two decodes left of 20
    CHECK_FALSE(p.decode_only());
  }

  TEST_CASE("no more than max_num_seqs run; the rest wait in arrival order") {
    KvCacheManager kv(64, 16, false);
    Scheduler s({2, 512, 1024}, kv);
    for (SeqId id = 1; id <= 4; ++id) s.add(spec(id, 3, 1));
    StepPlan p = s.schedule();
    CHECK(ids(p) == std::vector<SeqId>{1, 2});
    CHECK(s.num_waiting() == 2);
    auto out = run(s, p);  // max_tokens 1: both end with Length
    REQUIRE(out.size() == 2);
    CHECK(out[0].finish == FinishReason::Length);
    p = s.schedule();
    CHECK(ids(p) == std::vector<SeqId>{3, 4});
    CHECK(p.finished == std::vector<SeqId>{1, 2});
  }

  TEST_CASE("a priority sequence is admitted ahead of those already waiting") {
    KvCacheManager kv(64, 16, false);
    Scheduler s({1, 512, 1024}, kv);
    s.add(spec(1, 3));
    s.add(spec(2, 3));
    auto probe = spec(3, 3);
    probe.priority = true;
    s.add(probe);
    CHECK(ids(s.schedule()) == std::vector<SeqId>{3});
  }

  TEST_CASE("under block pressure the newest running sequence is preempted, then recomputed first") {
    // 4 blocks of 4 slots: two sequences of 6 tokens take 2 blocks each.
    KvCacheManager kv(4, 4, false);
    Scheduler s({4, 64, 1024}, kv);
    s.add(spec(1, 6, 10));
    s.add(spec(2, 6, 10));
    run(s, s.schedule());  // both prefilled: 7 tokens each, 6 computed, 2 blocks each
    CHECK(kv.num_used_blocks() == 4);
    run(s, s.schedule());  // both decode positions 6 and 7: still within 2 blocks
    run(s, s.schedule());
    // Position 8 needs a third block each: sequence 2 (the newest) gives way to 1.
    StepPlan p = s.schedule();
    CHECK(ids(p) == std::vector<SeqId>{1});
    CHECK(p.preempted == std::vector<SeqId>{2});
    CHECK(s.counters().preemptions == 1);
    CHECK(kv.block_table(1).size() == 3);
    CHECK_FALSE(kv.holds_blocks(2));
    CHECK(s.view(2).n_computed == 0);
    CHECK_FALSE(s.view(2).running);
    run(s, p);
    // Sequence 1 ends (stop token); sequence 2 comes back and recomputes its
    // prompt and generated tokens in one chunk, sampling at the end.
    const StepPlan q = s.schedule();
    REQUIRE(ids(q) == std::vector<SeqId>{1});
    run(s, q, 0);
    const StepPlan r = s.schedule();
    REQUIRE(ids(r) == std::vector<SeqId>{2});
    CHECK(r.seqs[0].start == 0);
    CHECK(r.seqs[0].tokens.size() == 9);  // 6 prompt + 3 generated
    CHECK(r.seqs[0].sample);
    CHECK(r.finished == std::vector<SeqId>{1});
  }

  TEST_CASE("a sequence that cannot fit even alone waits without taking blocks") {
    KvCacheManager kv(2, 4, false);
    Scheduler s({4, 64, 1024}, kv);
    s.add(spec(1, 12));  // needs 3 blocks
    const StepPlan p = s.schedule();
    CHECK(p.empty());
    CHECK(s.num_waiting() == 1);
    CHECK(kv.num_used_blocks() == 0);
  }

  TEST_CASE("stop tokens, max_tokens and max_model_len end sequences and free their blocks") {
    KvCacheManager kv(64, 4, false);
    Scheduler s({4, 64, 12}, kv);
    s.add(spec(1, 4, 100));  // ends on a stop token
    s.add(spec(2, 4, 2));    // ends on max_tokens
    s.add(spec(3, 8, 100));  // ends on max_model_len (12)
    std::vector<SampledToken> sampled{{1, 0}, {2, 5}, {3, 5}};
    auto out = s.update(s.schedule(), sampled);
    CHECK(out[0].finish == FinishReason::Stop);
    CHECK(out[1].finish == FinishReason::None);
    CHECK_FALSE(s.has(1));
    CHECK_FALSE(kv.holds_blocks(1));
    for (int i = 0; i < 3; ++i) {
      const StepPlan p = s.schedule();
      out = run(s, p, 5);
      for (const auto& o : out) {
        if (o.seq == 2) CHECK(o.finish == (i == 0 ? FinishReason::Length : FinishReason::None));
        if (o.seq == 3) CHECK(o.finish == (i == 2 ? FinishReason::Length : FinishReason::None));
      }
    }
    CHECK(s.idle());
    CHECK(kv.num_used_blocks() == 0);
  }

  TEST_CASE("aborting frees a waiting or running sequence; the next plan reports it") {
    KvCacheManager kv(64, 4, false);
    Scheduler s({1, 64, 1024}, kv);
    s.add(spec(1, 5));
    s.add(spec(2, 5));
    const StepPlan p = s.schedule();
    CHECK(ids(p) == std::vector<SeqId>{1});
    CHECK(s.finish(2));  // waiting
    CHECK(s.finish(1));  // running, in the plan being run
    CHECK_FALSE(s.finish(1));
    CHECK(run(s, p).empty());  // its sampled token is dropped
    CHECK(kv.num_used_blocks() == 0);
    const StepPlan q = s.schedule();
    CHECK(q.empty());
    CHECK(q.finished == std::vector<SeqId>{2, 1});
  }

  TEST_CASE("a shared prompt prefix is computed once") {
    KvCacheManager kv(64, 4, true);
    Scheduler s({4, 64, 1024}, kv);
    auto a = spec(1, 10);
    auto b = a;
    b.id = 2;
    s.add(a);
    run(s, s.schedule());
    s.add(b);
    const StepPlan p = s.schedule();
    const ScheduledSeq* sb = find(p, 2);
    REQUIRE(sb);
    CHECK(sb->start == 8);  // two full blocks reused
    CHECK(sb->tokens.size() == 2);
    CHECK(s.view(2).cached_tokens == 8);
    CHECK(s.counters().prefix_query_tokens == 20);
    CHECK(s.counters().prefix_hit_tokens == 8);
    CHECK(std::equal(sb->block_table.begin(), sb->block_table.begin() + 2, kv.block_table(1).begin()));
  }

  TEST_CASE("an unwritten prefix runs only the prompt's tail, never enters the prefix cache, and is recomputed once preempted") {
    KvCacheManager kv(64, 4, true);
    Scheduler s({4, 64, 1024}, kv);
    auto a = spec(1, 30, 3);
    a.unwritten_prefix = 29;
    s.add(a);
    const StepPlan p = s.schedule();
    const ScheduledSeq* sa = find(p, 1);
    REQUIRE(sa);
    CHECK(sa->start == 29);  // one token, reading a context of 30
    CHECK(sa->tokens.size() == 1);
    CHECK(sa->block_table.size() == 8);
    CHECK(s.view(1).cached_tokens == 0);
    CHECK(s.counters().prefix_hit_tokens == 0);
    run(s, p);
    run(s, s.schedule());
    // The same prompt, written for real, finds nothing cached.
    auto b = spec(1, 30, 2);
    b.id = 2;
    s.add(b);
    const StepPlan pb = s.schedule();
    const ScheduledSeq* sb = find(pb, 2);
    REQUIRE(sb);
    CHECK(sb->start == 0);
    CHECK(sb->tokens.size() == 30);
  }

  TEST_CASE("a preempted sequence with an unwritten prefix is recomputed in full") {
    KvCacheManager kv(10, 4, false);  // 40 slots
    Scheduler s({4, 64, 1024}, kv);
    auto a = spec(1, 8, 30);
    s.add(a);
    run(s, s.schedule());
    auto b = spec(2, 20, 30);
    b.unwritten_prefix = 19;
    s.add(b);
    run(s, s.schedule());  // a decodes, b admitted: 2 + 5 blocks
    // Decode until the pool runs out and the newest (b) is preempted.
    bool preempted = false;
    for (int i = 0; i < 40 && !preempted; ++i) {
      const StepPlan p = s.schedule();
      preempted = std::find(p.preempted.begin(), p.preempted.end(), SeqId{2}) != p.preempted.end();
      run(s, p);
    }
    REQUIRE(preempted);
    for (int i = 0; i < 40 && s.has(1); ++i) run(s, s.schedule());  // a finishes, freeing room
    const StepPlan p = s.schedule();
    const ScheduledSeq* sb = find(p, 2);
    REQUIRE(sb);
    CHECK(sb->start == 0);  // its prompt and what it generated, computed for real
  }

  TEST_CASE("a step that is not updated leaves nothing computed; clear() empties everything") {
    KvCacheManager kv(64, 4, true);
    Scheduler s({4, 64, 1024}, kv);
    s.add(spec(1, 6));
    s.add(spec(2, 6));
    const StepPlan p = s.schedule();  // never updated: as if a reset cut it short
    const StepPlan again = s.schedule();
    CHECK(ids(again) == ids(p));
    CHECK(again.seqs[0].start == 0);
    s.add(spec(3, 6));
    const auto all = s.clear();
    CHECK(all == std::vector<SeqId>{1, 2, 3});
    CHECK(s.idle());
    CHECK(kv.num_used_blocks() == 0);
  }
}
