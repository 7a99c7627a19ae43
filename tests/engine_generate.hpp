// Generation of several requests submitted together, for tests that compare
// engines: each request's token ids, and when greedy (with two logprobs) the
// chosen token's logprob and the margin between the two best tokens at each position.
#pragma once
#include <doctest/doctest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.hpp"
#include "engine/spec/proposer.hpp"
#include "engine/tokenizer.hpp"
#include "kernels/shape_registry.hpp"

namespace test_engine {

struct Generated {
  std::vector<int32_t> ids;
  std::vector<float> logprob;  // of the chosen token
  std::vector<float> margin;   // best minus second-best logprob
};

// Waits under `lk` until `finished()` holds. The bound is for a hung engine, not
// a speed check: a sanitizer build on a loaded machine takes minutes. At the
// bound the engine is stopped before the test fails: the requests' sinks use
// the caller's frame (its mutex, its results), which failing leaves.
template <class Finished>
void wait_finished(inferd::engine::Engine& eng, std::unique_lock<std::mutex>& lk, std::condition_variable& cv,
                   Finished finished, std::chrono::milliseconds bound = std::chrono::minutes(30)) {
  if (cv.wait_for(lk, bound, finished)) return;
  lk.unlock();  // stopping ends the requests, through their sinks
  eng.stop();
  FAIL("the engine did not finish its requests within " << bound.count() << " ms");
}

inline std::vector<Generated> generate(inferd::engine::Engine& eng, const std::vector<std::vector<int32_t>>& prompts,
                                       int max_tokens, const inferd::engine::SamplingParams& sampling) {
  namespace engine = inferd::engine;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Generated> out(prompts.size());
  size_t done = 0;
  std::vector<engine::GenerationRequest> reqs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    engine::GenerationRequest r;
    r.id = std::to_string(i);
    r.prompt = prompts[i];
    r.sampling = sampling;
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    r.sink = [&, i](engine::Delta&& d) {
      std::lock_guard lk(mu);
      for (const auto& t : d.tokens) {
        out[i].ids.push_back(t.id);
        out[i].logprob.push_back(t.logprob);
        out[i].margin.push_back(t.top.size() >= 2 ? t.top[0].second - t.top[1].second : 1e9f);
      }
      if (d.finish != engine::FinishReason::None) {
        CHECK_MESSAGE(d.error.empty(), d.error);
        ++done;
        cv.notify_all();
      }
    };
    reqs.push_back(std::move(r));
  }
  eng.submit_together(std::move(reqs));
  std::unique_lock lk(mu);
  wait_finished(eng, lk, cv, [&] { return done == prompts.size(); });
  return out;
}

inline std::vector<Generated> generate_greedy(inferd::engine::Engine& eng,
                                              const std::vector<std::vector<int32_t>>& prompts, int max_tokens) {
  inferd::engine::SamplingParams greedy;
  greedy.temperature = 0;
  greedy.logprobs = 2;
  return generate(eng, prompts, max_tokens, greedy);
}

// Greedy outputs of an engine without speculation, to compare one with it against:
// each prompt alone, then all of them batched.
struct GreedyBaseline {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<Generated> alone, batched;
};

inline GreedyBaseline greedy_baseline(const inferd::engine::EngineOptions& o, const std::vector<const char*>& texts,
                                      int max_tokens) {
  GreedyBaseline b;
  inferd::engine::Engine plain(o);
  for (const char* text : texts) b.prompts.push_back(plain.tokenizer().encode(text, true, false));
  for (const auto& p : b.prompts) b.alone.push_back(generate_greedy(plain, {p}, max_tokens)[0]);
  b.batched = generate_greedy(plain, b.prompts, max_tokens);
  return b;
}

// A proposer's drafts for one sequence, asked alone.
inline std::vector<int32_t> drafts_for(inferd::engine::Proposer& p, uint64_t seq, const std::vector<int32_t>& tokens,
                                       int k) {
  const inferd::engine::DraftRequest req{seq, tokens, k};
  std::vector<std::vector<int32_t>> out;
  p.propose({&req, 1}, out);
  REQUIRE(out.size() == 1);
  return out[0];
}

// A proposer's warm-up touches every shape key it says it can reach under `axes`.
inline void check_warm_covers_its_keys(inferd::engine::Proposer& p, const inferd::engine::ShapeAxes& axes) {
  const auto keys = p.reachable_shape_keys(axes);
  REQUIRE(!keys.empty());
  auto& reg = inferd::kernels::ShapeRegistry::global();
  reg.clear();
  p.warm(axes);
  for (const auto& k : keys) CHECK_MESSAGE(reg.seen(k), k.str());
  reg.clear();
}

// A small engine on `model`: one thread, 256 positions, steps of 64 tokens, 16 MiB of KV cache.
inline inferd::engine::EngineOptions small_engine(const std::string& model) {
  inferd::engine::EngineOptions o;
  o.model_path = model;
  o.threads = 1;
  o.max_model_len = 256;
  o.max_num_batched_tokens = 64;
  o.kv_cache_bytes = 16 << 20;
  return o;
}

}  // namespace test_engine
