// The whole engine on the CUDA backend against the engine on the CPU backend,
// greedy, on a real GGUF model (INFERD_MODEL, else the default model in the
// cache): weights, KV cache, step inputs and activations in device memory,
// chunked prefill, decode batches and a shared prefix. Greedy tokens must agree
// up to the first place the CPU itself calls a near tie: its two best tokens
// closer than a few times the largest difference between the two backends'
// logprobs for the same token seen anywhere they agree (the measured numeric
// noise: summation order, f16 rounding of attention probabilities on the CPU).
// Past a divergence nothing is compared.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/engine.hpp"
#include "tests/engine_generate.hpp"
#include "kernels/cuda/cuda_backend.hpp"
#include "tests/gpu/cuda_runner.hpp"

using namespace inferd;

namespace {

constexpr float kNoiseFactor = 4.0f;

using test_cuda::model_path;

}  // namespace

TEST_CASE("engine: CUDA greedy tokens agree with the CPU's on a real model") {
  const std::string path = model_path();
  REQUIRE_MESSAGE(std::filesystem::exists(path), "no model at " << path << " (set INFERD_MODEL)");
  engine::EngineOptions o;
  o.model_path = path;
  o.max_model_len = 512;
  o.max_num_batched_tokens = 64;  // the long prompt is prefilled in chunks
  o.kv_cache_bytes = 64 << 20;

  std::vector<std::vector<int32_t>> prompts;
  std::vector<int32_t> longer;
  for (int i = 0; i < 150; ++i) longer.push_back(200 + (i * 131) % 20000);
  prompts.push_back(longer);
  prompts.push_back({1, 504, 3303, 314, 260, 1345});
  prompts.push_back(std::vector<int32_t>(longer.begin(), longer.begin() + 70));  // a shared prefix
  for (int s = 0; s < 5; ++s) prompts.push_back({1, 30 + s, 800 + 7 * s});      // a wider decode batch

  std::vector<test_engine::Generated> want;
  {
    engine::Engine cpu(o);
    want = test_engine::generate_greedy(cpu, prompts, 24);
  }
  o.backend = [] { return kernels::make_cuda_backend(0); };
  engine::Engine gpu(o);
  MESSAGE("backend: " << gpu.backend().name());
  const auto got = test_engine::generate_greedy(gpu, prompts, 24);

  // Where the two agree: how far apart their logprobs for that token are.
  std::vector<size_t> agreed(prompts.size(), 0);
  float noise = 0;
  int compared = 0;
  for (size_t p = 0; p < prompts.size(); ++p) {
    REQUIRE(got[p].ids.size() == want[p].ids.size());
    while (agreed[p] < want[p].ids.size() && got[p].ids[agreed[p]] == want[p].ids[agreed[p]]) {
      noise = std::max(noise, std::abs(got[p].logprob[agreed[p]] - want[p].logprob[agreed[p]]));
      ++agreed[p];
    }
    compared += static_cast<int>(agreed[p]);
  }
  MESSAGE(compared << " of " << prompts.size() * 24 << " tokens equal; largest logprob difference where equal "
                   << noise);
  CHECK(noise < 0.5f);  // a wrong op, position or block table moves logprobs by whole nats
  for (size_t p = 0; p < prompts.size(); ++p) {
    const size_t i = agreed[p];
    if (i == want[p].ids.size()) continue;
    CAPTURE(p);
    CAPTURE(i);
    CHECK_MESSAGE(want[p].margin[i] < kNoiseFactor * noise + 1e-3f,
                  "CUDA chose " << got[p].ids[i] << ", CPU " << want[p].ids[i] << " with a margin of "
                                << want[p].margin[i]);
  }
  CHECK(compared >= static_cast<int>(prompts.size()));  // at least every first token
}

TEST_CASE("engine: tokens drawn on the GPU equal the greedy argmax of the logits brought back; seeds reproduce") {
  const std::string path = model_path();
  REQUIRE_MESSAGE(std::filesystem::exists(path), "no model at " << path << " (set INFERD_MODEL)");
  engine::EngineOptions o;
  o.model_path = path;
  o.max_model_len = 256;
  o.kv_cache_bytes = 64 << 20;
  o.backend = [] { return kernels::make_cuda_backend(0); };
  engine::Engine gpu(o);
  std::vector<std::vector<int32_t>> prompts;
  for (int s = 0; s < 6; ++s) prompts.push_back({1, 30 + s, 800 + 7 * s, 2000 + s});

  // logprobs bring the logits back (the host samples); without them the device
  // draws. Greedy, both are the argmax of the same logits: equal bit for bit.
  engine::SamplingParams greedy;
  greedy.temperature = 0;
  const auto drawn = test_engine::generate(gpu, prompts, 20, greedy);
  const auto host = test_engine::generate_greedy(gpu, prompts, 20);
  for (size_t p = 0; p < prompts.size(); ++p) CHECK(drawn[p].ids == host[p].ids);

  // Sampled on the device: a seed gives the same tokens again; another seed, others.
  engine::SamplingParams sampled;
  sampled.temperature = 1.5f;
  sampled.top_k = 50;
  sampled.top_p = 0.95f;
  sampled.seed = 1234;
  const auto a = test_engine::generate(gpu, prompts, 20, sampled);
  const auto b = test_engine::generate(gpu, prompts, 20, sampled);
  sampled.seed = 99;
  const auto c = test_engine::generate(gpu, prompts, 20, sampled);
  for (size_t p = 0; p < prompts.size(); ++p) {
    CHECK(a[p].ids == b[p].ids);
    CHECK(a[p].ids != c[p].ids);  // 20 draws at temperature 1.5 among up to 50 tokens
  }
}
