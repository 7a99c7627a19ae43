// Warm-up plan derivation: for several configurations the plan reaches every
// bucket of the shape space; a plan made for one configuration is caught when a
// wider one is checked against it; and a real run on the default model touches
// exactly the reachable key set the shape tracer predicted.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include "engine/engine.hpp"
#include "kernels/shape_registry.hpp"
#include "test_paths.hpp"
#include "warmup/plan.hpp"
#include "warmup/runner.hpp"
#include "tests/unit/capturing_backend.hpp"

using namespace inferd;

namespace {

warmup::PlanLimits limits(int len, int seqs, int batched) { return {len, seqs, batched}; }

engine::ShapeAxes axes_of(const warmup::PlanLimits& l) {
  return engine::shape_axes(l.max_num_batched_tokens, l.max_num_seqs, l.max_model_len);
}

// The prompt tokens a phase runs (its unwritten prefixes are not run).
int run_tokens(const warmup::Phase& ph) {
  int n = 0;
  for (const auto& w : ph.waves)
    for (const auto& q : w) n += q.prompt_tokens - q.unwritten_prefix;
  return n;
}

}  // namespace

TEST_CASE("warm-up plan: buckets are powers of two capped at the axis maximum") {
  CHECK(engine::bucket_representatives(1) == std::vector<int64_t>{1});
  CHECK(engine::bucket_representatives(8) == std::vector<int64_t>{1, 2, 4, 8});
  CHECK(engine::bucket_representatives(100) == std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64, 100});
  const auto a = engine::shape_axes(2048, 64, 8192);
  CHECK(a.contexts.back() == 8191);  // the last sampled token is never fed back
  CHECK(a.decode_batches.back() == 64);
  CHECK(engine::shape_axes(4, 64, 100).sampled_seqs.back() == 4);  // a step holds at most 4 tokens
}

TEST_CASE("warm-up plan: every configuration's plan reaches every bucket and fits its limits") {
  const warmup::WarmupOptions opts;
  for (const auto& l : {limits(8192, 64, 2048), limits(512, 8, 128), limits(4096, 256, 8192), limits(3000, 5, 100),
                        limits(100000, 16, 512), limits(2, 1, 1), limits(64, 3, 7), limits(1024, 16, 256),
                        limits(300, 64, 8192)}) {
    CAPTURE(l.max_model_len);
    CAPTURE(l.max_num_seqs);
    CAPTURE(l.max_num_batched_tokens);
    const auto axes = axes_of(l);
    const warmup::Plan plan = warmup::make_plan(axes, l, opts);
    REQUIRE(plan.phases.size() == 4);
    CHECK(plan.phases[0].name == "ramped");
    CHECK(plan.phases[3].name == "sustained");
    CHECK(warmup::unreached_buckets(plan, axes, l).empty());
    // A re-warm's least plan: the same phases, reaching the same buckets, running
    // fewer prompt tokens (its ramp may have more prompts: the context buckets a
    // long prefill passed through are each reached by a one-token step).
    const warmup::Plan least = warmup::make_plan(axes, l, opts, warmup::Depth::least);
    CHECK(warmup::unreached_buckets(least, axes, l).empty());
    REQUIRE(least.phases.size() == plan.phases.size());
    for (size_t i = 1; i < plan.phases.size(); ++i) CHECK(least.phases[i].requests() == plan.phases[i].requests());
    CHECK(run_tokens(least.phases[0]) <= run_tokens(plan.phases[0]));
    // Only the least plan leaves a prefix unwritten, and each such prompt runs its last token.
    for (const auto& w : plan.phases[0].waves) CHECK(w.front().unwritten_prefix == 0);
    for (const auto& ph : least.phases)
      for (const auto& w : ph.waves)
        for (const auto& q : w) CHECK((q.unwritten_prefix == 0 || q.unwritten_prefix == q.prompt_tokens - 1));
    CHECK(plan.phases[1].requests() <= l.max_num_seqs);
    for (const auto& ph : plan.phases)
      for (const auto& w : ph.waves)
        for (const auto& q : w) {
          CHECK(q.prompt_tokens >= 1);
          CHECK(q.max_tokens >= 1);
          CHECK(q.prompt_tokens + q.max_tokens <= std::max(2, l.max_model_len));
        }
    // Ramped steps grow.
    const auto& r = plan.phases[0].waves;
    CHECK(std::is_sorted(r.begin(), r.end(), [](auto& a, auto& b) {
      return a.size() * a.front().prompt_tokens < b.size() * b.front().prompt_tokens;
    }));
  }
}

TEST_CASE("warm-up plan: a re-warm reaches the top context bucket without prefilling the long prompt") {
  const auto l = limits(8192, 64, 2048);  // the default configuration on the default model
  const auto axes = axes_of(l);
  const warmup::WarmupOptions opts;
  const warmup::Plan full = warmup::make_plan(axes, l, opts);
  const warmup::Plan least = warmup::make_plan(axes, l, opts, warmup::Depth::least);
  const auto& longest = least.phases[0].waves.back().front();  // ramped steps grow: it runs one token
  CHECK(longest.prompt_tokens == 4097);
  CHECK(longest.unwritten_prefix == 4096);
  CHECK(run_tokens(full.phases[0]) == 6144);  // 4097 + 1024 + 512 + ... + 1 (the 2048-token step is the long prompt's)
  // The long prompt runs one token, and the burst's and concurrent-long's first
  // steps (512 and 2048 tokens) need no ramp prompts of their own.
  CHECK(run_tokens(least.phases[0]) * 4 < run_tokens(full.phases[0]));
  // The sustained phase's 100-token prompt is in the 128 bucket but does not
  // count for it: add[128 x 576] lies in a power of two that add[100 x 576] does
  // not reach. The ramp keeps its 128-token prompt.
  std::set<int> ramp_prompts;
  for (const auto& w : least.phases[0].waves) ramp_prompts.insert(w.front().prompt_tokens);
  CHECK(ramp_prompts.count(128));
  CHECK(!ramp_prompts.count(2048));  // the concurrent-long prompts' first step is 2048 tokens
  CHECK(warmup::unreached_buckets(least, axes, l).empty());
  // Without its unwritten prefix, the same request would not be the plan's: the
  // bucket accounting starts where the run starts.
  warmup::Plan cut = least;
  cut.phases[0].waves.pop_back();
  CHECK(warmup::unreached_buckets(cut, axes, l) == std::vector<std::string>{"context bucket 8192"});
}

TEST_CASE("warm-up plan: a configuration that widens the shape space is caught") {
  const warmup::WarmupOptions opts;
  const auto small = limits(1024, 8, 256);
  const warmup::Plan plan = warmup::make_plan(axes_of(small), small, opts);
  const auto wide = limits(8192, 32, 256);
  const auto missing = warmup::unreached_buckets(plan, axes_of(wide), wide);
  const std::set<std::string> got(missing.begin(), missing.end());
  CHECK(got.count("context bucket 2048"));
  CHECK(got.count("context bucket 8192"));
  CHECK(got.count("decode batch bucket 32"));
  CHECK(got.count("decode batch bucket 16"));
  CHECK(!got.count("decode batch bucket 8"));
}

TEST_CASE("warm-up plan: a burst too small for its decode buckets is named") {
  warmup::WarmupOptions opts;
  opts.burst_requests = 3;
  const auto l = limits(1024, 16, 256);
  const auto missing = warmup::unreached_buckets(warmup::make_plan(axes_of(l), l, opts), axes_of(l), l);
  CHECK(std::find(missing.begin(), missing.end(), "decode batch bucket 16") != missing.end());
}

TEST_CASE("warm-up run: a real plan touches exactly the traced reachable keys" * doctest::test_suite("whole_model")) {
  engine::EngineOptions o;
  o.model_path = test_paths::default_model();
  o.threads = 2;
  o.max_model_len = 256;
  o.max_num_batched_tokens = 64;
  o.max_num_seqs = 4;
  o.kv_cache_bytes = 64 << 20;
  engine::Engine eng(o);
  const auto reachable = eng.reachable_shape_keys();
  REQUIRE(reachable.size() > 40);
  // Every kernel key the shape tracer predicts names one of the model's launch sites.
  CHECK(std::any_of(reachable.begin(), reachable.end(), [](auto& k) { return k.str() == "step.decode[b=4]"; }));
  CHECK(std::any_of(reachable.begin(), reachable.end(),
                    [](auto& k) { return k.str() == "attention.f16.ctx[kvh=3,d=64,ctx=256]"; }));

  // The CPU captures no steps: no graph keys, and the plan of before.
  CHECK(eng.shape_axes().graph_sizes.empty());
  CHECK(std::none_of(reachable.begin(), reachable.end(), [](auto& k) { return k.op.starts_with("graph."); }));

  auto& reg = kernels::ShapeRegistry::global();
  warmup::WarmupOptions opts;
  opts.sustained_max_tokens = 100;
  const auto l = limits(eng.max_model_len(), o.max_num_seqs, o.max_num_batched_tokens);
  const warmup::Plan plan = warmup::make_plan(eng.shape_axes(), l, opts);
  const warmup::Report report = warmup::run_plan(eng, plan, reachable, opts);
  INFO(warmup::summarize(report));
  CHECK(report.passed());
  CHECK(report.keys_covered == reachable.size());
  // Nothing the run touched lies outside the reachable set.
  std::set<std::string> want;
  for (const auto& k : reachable) want.insert(k.str());
  for (const auto& entry : reg.snapshot()) CHECK_MESSAGE(want.count(entry.first.str()), entry.first.str());

  // The gate names a reachable key that was never touched. This second run is
  // not served from the prefix cache: it touches every other key again.
  auto wider = reachable;
  wider.push_back({"matmul.q4_1", "n=7,k=7,t=1"});
  const warmup::Report gap = warmup::run_plan(eng, plan, wider, opts);
  CHECK(!gap.passed());
  CHECK(gap.keys_covered == reachable.size());
  CHECK(gap.missing.size() == 1);
  CHECK(gap.failure.find("1 of " + std::to_string(wider.size()) + " reachable shape keys were not touched: "
                          "matmul.q4_1[n=7,k=7,t=1]") != std::string::npos);

  // The least plan, as a recovery runs it, touches every key again on its own,
  // generating a fraction of the tokens.
  const warmup::Plan least = warmup::make_plan(eng.shape_axes(), l, opts, warmup::Depth::least);
  const warmup::Report quick = warmup::run_plan(eng, least, reachable, opts);
  INFO(warmup::summarize(quick));
  CHECK(quick.passed());
  CHECK(quick.keys_covered == reachable.size());
  auto generated = [](const warmup::Plan& p) {
    int n = 0;
    for (const auto& ph : p.phases)
      for (const auto& w : ph.waves)
        for (const auto& q : w) n += q.max_tokens;
    return n;
  };
  CHECK(generated(least) * 2 < generated(plan));

  // Coverage counts only what this run touched: a run that launches nothing
  // after full ones covers nothing.
  const warmup::Report idle = warmup::run_plan(eng, warmup::Plan{}, reachable, opts);
  CHECK(!idle.passed());
  CHECK(idle.keys_covered == 0);
  CHECK(idle.missing.size() == reachable.size());

  // A run told to stop fails in its first phase.
  const warmup::Report partial = warmup::run_plan(eng, plan, reachable, opts, {}, [] { return true; });
  CHECK(!partial.passed());
  CHECK(partial.failure.find("phase 1 ramped failed") != std::string::npos);
}

TEST_CASE("warm-up plan: every graph size gets decode steps of its own, recorded and then replayed") {
  const warmup::WarmupOptions opts;
  const auto l = limits(1024, 16, 256);
  const auto plain = axes_of(l);
  // Sizes the burst's powers of two already reach leave the plan as it was.
  const auto pow2 = engine::shape_axes(256, 16, 1024, {1, 2, 4, 8});
  CHECK(pow2.graph_sizes == std::vector<int64_t>{1, 2, 4, 8});
  CHECK(warmup::describe(warmup::make_plan(pow2, l, opts)) == warmup::describe(warmup::make_plan(plain, l, opts)));
  CHECK(warmup::unreached_buckets(warmup::make_plan(pow2, l, opts), pow2, l).empty());
  // Others get burst steps of their own; a plan made without them does not reach them.
  const auto odd = engine::shape_axes(256, 16, 1024, {3, 5, 6, 12});
  for (auto depth : {warmup::Depth::full, warmup::Depth::least})
    CHECK(warmup::unreached_buckets(warmup::make_plan(odd, l, opts, depth), odd, l).empty());
  const auto missing = warmup::unreached_buckets(warmup::make_plan(plain, l, opts), odd, l);
  CHECK(missing == std::vector<std::string>{"graph size 6"});  // 3, 5 and 12 pad 2, 4 and 8
  // A burst narrower than a size cannot reach it (the 3 concurrent long prompts reach 4).
  warmup::WarmupOptions narrow;
  narrow.burst_requests = 2;
  const auto gap = warmup::unreached_buckets(warmup::make_plan(pow2, l, narrow), pow2, l);
  CHECK(std::find(gap.begin(), gap.end(), "graph size 8") != gap.end());
  CHECK(std::find(gap.begin(), gap.end(), "graph size 2") == gap.end());
}

TEST_CASE("warm-up run: on a backend that captures, the gate needs every graph size recorded and replayed") {
  engine::EngineOptions o;
  o.model_path = test_paths::default_model();
  o.threads = 1;
  o.max_model_len = 256;
  o.max_num_batched_tokens = 64;
  o.max_num_seqs = 4;
  o.kv_cache_bytes = 64 << 20;
  o.graph_sizes = {1, 3, 4};
  test_capture::CapturingBackend* cap = nullptr;
  o.backend = [&] {
    auto b = std::make_unique<test_capture::CapturingBackend>();
    cap = b.get();
    return b;
  };
  engine::Engine eng(o);
  CHECK(eng.shape_axes().graph_sizes == std::vector<int64_t>{1, 3, 4});
  const auto reachable = eng.reachable_shape_keys();
  std::set<std::string> want;
  for (const auto& k : reachable) want.insert(k.str());
  for (int b : {1, 3, 4}) {
    CHECK(want.count("graph.capture[b=" + std::to_string(b) + "]"));
    CHECK(want.count("graph.replay[b=" + std::to_string(b) + "]"));
  }
  warmup::WarmupOptions opts;
  const auto l = limits(eng.max_model_len(), o.max_num_seqs, o.max_num_batched_tokens);
  const warmup::Plan plan = warmup::make_plan(eng.shape_axes(), l, opts, warmup::Depth::least);
  CHECK(warmup::unreached_buckets(plan, eng.shape_axes(), l).empty());
  const warmup::Report report = warmup::run_plan(eng, plan, reachable, opts);
  INFO(report.failure);
  INFO(warmup::summarize(report));
  CHECK(report.passed());
  CHECK(report.keys_covered == reachable.size());
  for (const auto& entry : kernels::ShapeRegistry::global().snapshot())
    CHECK_MESSAGE(want.count(entry.first.str()), entry.first.str());
  REQUIRE(cap != nullptr);
  for (int b : {1, 3, 4}) {
    CAPTURE(b);
    CHECK(cap->records[b] >= 1);
    CHECK(cap->replays[b] >= 1);
  }
  // The share of the run that recorded steps: part of it, and said.
  CHECK(report.capture_seconds > 0);
  CHECK(report.capture_seconds < report.seconds);
  CHECK(warmup::summarize(report).find("s recording captured steps") != std::string::npos);

  // The gate stays closed on a run that never replays a size: here none is.
  auto eager = o;
  eager.graph_sizes = {};
  engine::Engine plain(eager);
  const warmup::Report gap = warmup::run_plan(plain, plan, reachable, opts);
  CHECK(!gap.passed());
  CHECK(gap.missing.size() == 6);
  CHECK(gap.capture_seconds == 0);
  CHECK(gap.failure.find("graph.capture[b=1]") != std::string::npos);
}
