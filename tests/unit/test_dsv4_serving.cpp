// DeepSeek-V4 served by the engine (engine/models/deepseek_v4_serving.cpp) on
// the tiny checkpoint with a tokenizer (tests/golden/dsv4-tiny-chat): the
// tokens of several requests decoded together, with chunked prefill and with
// preemption, are those of the model's own greedy decode of each prompt alone
// through its state (DeepseekV4::forward, itself checked against transformers
// in test_dsv4_decode.cpp). The scalar kernels sum in the same order whatever
// the rows, so the two agree bit for bit.
#include <doctest/doctest.h>

#include <algorithm>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/engine.hpp"
#include "engine/models/deepseek_v4.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "tests/engine_generate.hpp"
#include "tests/unit/test_paths.hpp"

using namespace inferd;

namespace {

std::string fixture() { return test_paths::source_dir() + "/tests/golden/dsv4-tiny-chat"; }

kernels::BackendFactory scalar_cpu() {
  return [] { return kernels::make_cpu_backend(1, kernels::CpuIsa::Scalar); };
}

// The model's greedy continuation of `prompt`, one sequence alone.
std::vector<int32_t> greedy_alone(const engine::DeepseekV4& model, const std::vector<int32_t>& prompt, int n) {
  const auto vocab = static_cast<size_t>(model.config().vocab);
  engine::DeepseekV4State state;
  std::vector<float> logits = model.forward(state, prompt);
  std::vector<int32_t> out;
  while (static_cast<int>(out.size()) < n) {
    const auto last = std::span(logits).subspan(logits.size() - vocab);
    out.push_back(static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin()));
    logits = model.forward(state, std::span(&out.back(), 1));
  }
  return out;
}

// Prompts of `lengths` tokens from a fixed walk through the byte tokens and merges.
std::vector<std::vector<int32_t>> prompts(const std::vector<int>& lengths) {
  std::vector<std::vector<int32_t>> out;
  uint32_t x = 12345;
  for (int n : lengths) {
    std::vector<int32_t> p;
    for (int i = 0; i < n; ++i) {
      x = x * 1103515245u + 12345u;
      p.push_back(static_cast<int32_t>((x >> 8) % 480));
    }
    out.push_back(std::move(p));
  }
  return out;
}

engine::EngineOptions options() {
  engine::EngineOptions o;
  o.model_path = fixture();
  o.backend = scalar_cpu();
  o.max_model_len = 256;
  o.max_num_seqs = 4;
  o.max_num_batched_tokens = 32;  // long prompts run in chunks, beside other sequences' decodes
  return o;
}

void check_against_alone(engine::Engine& eng, const std::vector<std::vector<int32_t>>& ps, int n) {
  auto cpu = kernels::make_cpu_backend(1, kernels::CpuIsa::Scalar);
  const auto model = engine::DeepseekV4::load(fixture(), *cpu);
  const auto got = test_engine::generate_greedy(eng, ps, n);
  for (size_t i = 0; i < ps.size(); ++i) {
    CAPTURE(i);
    CAPTURE(ps[i].size());
    CHECK(got[i].ids == greedy_alone(*model, ps[i], n));
  }
}

}  // namespace

TEST_CASE("dsv4 serving: requests decoded together give each prompt's greedy tokens alone") {
  engine::Engine eng(options());
  CHECK(eng.model_config().architecture == "deepseek_v4");
  // 3 to 140 prompt tokens and 30 generated: the window (16), ratio-4 blocks and
  // the ratio-128 block are crossed in prefill chunks and while decoding.
  check_against_alone(eng, prompts({3, 21, 140, 47, 9, 64}), 30);
}

TEST_CASE("dsv4 serving: a preempted sequence starts its state again and gives the same tokens") {
  engine::EngineOptions o = options();
  o.num_kv_blocks = 17;  // one sequence of max_model_len: four sequences of 70 tokens preempt each other
  engine::Engine eng(o);
  check_against_alone(eng, prompts({40, 41, 42, 43}), 30);
  CHECK(eng.stats().preemptions_total > 0);
}

TEST_CASE("dsv4 serving: what its state cannot do is refused") {
  engine::EngineOptions o = options();
  o.speculative = engine::NgramOptions{};
  CHECK_THROWS_WITH_AS(engine::Engine{o}, doctest::Contains("not supported for deepseek_v4"), std::invalid_argument);
  o = options();
  o.block_size = 12;  // a block would end inside a ratio-4 window
  CHECK_THROWS_WITH_AS(engine::Engine{o}, doctest::Contains("block_size 12 must be a multiple of 4"),
                       std::invalid_argument);
}

TEST_CASE("dsv4 serving: entries pooled into paged blocks give the logits of entries in the state") {
  auto cpu = kernels::make_cpu_backend(1, kernels::CpuIsa::Scalar);
  const auto model = engine::DeepseekV4::load(fixture(), *cpu);
  const auto& c = model->config();
  constexpr int64_t kBlock = 16, kBlocks = 12;
  const std::vector<int32_t> table = {7, 2, 11, 0, 5, 9, 1, 10, 3, 8, 4, 6};  // the blocks out of order
  // Per compressed layer, its entries' blocks and its indexer keys' blocks (rows of up to head_dim floats).
  const int64_t stride = kBlock / 4 * c.head_dim;
  std::vector<std::vector<float>> memory;
  engine::DeepseekV4State own, paged;
  paged.layers.resize(static_cast<size_t>(c.layers));
  for (int64_t l = 0; l < c.layers; ++l) {
    if (c.ratios[size_t(l)] == 0) continue;
    for (auto* k : {&paged.layers[size_t(l)].compressor, &paged.layers[size_t(l)].index}) {
      memory.emplace_back(static_cast<size_t>(kBlocks * stride), 0.0f);
      k->pages = {memory.back().data(), stride, kBlock, table};
    }
  }
  const auto tokens = prompts({150}).front();
  // A prompt in chunks, then decoding: windows close inside chunks and between steps.
  for (size_t at = 0; at < tokens.size();) {
    const size_t n = at < 130 ? std::min<size_t>(13, 130 - at) : 1;
    const auto piece = std::span(tokens).subspan(at, n);
    CHECK(model->forward(paged, piece) == model->forward(own, piece));
    at += n;
  }
  for (int64_t l = 0; l < c.layers; ++l) {
    const int64_t r = c.ratios[size_t(l)];
    if (r == 0) continue;
    CAPTURE(l);
    auto& p = paged.layers[size_t(l)];
    auto& o = own.layers[size_t(l)];
    CHECK(p.compressor.entries.empty());  // all of them went to the blocks
    REQUIRE(p.compressor.pooled == o.compressor.pooled);
    CHECK(p.compressor.pooled == 150 / r);
    for (int64_t j = 0; j < p.compressor.pooled; ++j) {
      // In the block of the window's first position, at its row there, as DeepseekV4Pages says.
      const float* at = p.compressor.pages.base + table[size_t(j * r / kBlock)] * stride + (j * r % kBlock) / r * c.head_dim;
      const float* want = o.compressor.entry(j, r, c.head_dim);
      CHECK(std::vector<float>(at, at + c.head_dim) == std::vector<float>(want, want + c.head_dim));
    }
  }
  // A table too short for the next entry is an error, not a write past it.
  engine::DeepseekV4State::Compressor short_table;
  std::vector<float> one(static_cast<size_t>(stride));
  short_table.pages = {one.data(), stride, kBlock, std::span(table).first(1)};
  CHECK_THROWS_AS(short_table.entry(4, 4, c.head_dim), std::out_of_range);
}
