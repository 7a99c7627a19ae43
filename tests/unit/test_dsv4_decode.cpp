// DeepSeek-V4 fed a sequence in pieces through its state
// (DeepseekV4::forward, engine/models/deepseek_v4.hpp) on the committed tiny
// checkpoint (tests/golden/dsv4-tiny): against transformers' own greedy
// generation with its cache (tests/golden/dsv4_decode.bin, from
// tools/make_dsv4_decode_golden.py), and against the engine's own prefill of
// the whole sequence. Window 16, ratio-4 and ratio-128 layers: the cases cross
// the window and both kinds of compressor boundary while decoding.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "engine/models/deepseek_v4.hpp"
#include "tests/unit/dsv4_golden.hpp"
#include "tests/unit/test_paths.hpp"

using namespace inferd;
using dsv4_golden::array;

namespace {

const std::string kGolden = "dsv4_decode.bin";

std::string fixture() { return test_paths::source_dir() + "/tests/golden/dsv4-tiny"; }

std::vector<int32_t> ints(const std::string& name, const std::string& file) {
  const auto& a = array(name, file);
  return {a.as<int32_t>(), a.as<int32_t>() + a.dim(0)};
}

int32_t argmax(std::span<const float> row) {
  return int32_t(std::max_element(row.begin(), row.end()) - row.begin());
}

// The largest |got - want| over rows of `vocab`, and the largest |want|.
struct Gap {
  double max_abs = 0, max_ref = 0;
  void add(std::span<const float> got, const float* want) {
    for (size_t i = 0; i < got.size(); ++i) {
      max_abs = std::max(max_abs, std::fabs(double(got[i]) - want[i]));
      max_ref = std::max(max_ref, std::fabs(double(want[i])));
    }
  }
  double relative() const { return max_abs / max_ref; }
};

// Feeds `tokens` to a fresh state in pieces of the given sizes (the last one
// repeated) and returns every position's logits.
std::vector<float> in_pieces(const engine::DeepseekV4& model, std::span<const int32_t> tokens,
                             const std::vector<size_t>& sizes) {
  engine::DeepseekV4State state;
  std::vector<float> out;
  for (size_t at = 0, i = 0; at < tokens.size(); ++i) {
    const size_t n = std::min(sizes[std::min(i, sizes.size() - 1)], tokens.size() - at);
    const std::vector<float> logits = model.forward(state, tokens.subspan(at, n));
    out.insert(out.end(), logits.begin(), logits.end());
    at += n;
  }
  CHECK(state.position == int64_t(tokens.size()));
  return out;
}

}  // namespace

TEST_CASE("deepseek_v4 decoding a token a step matches transformers' generate with its cache") {
  // As the prefill golden (test_dsv4_forward.cpp): float32 on both sides in
  // different orders, so rounding only; transformers' cached steps are within
  // 2.7e-7 of its own full forward (the golden script prints it). The closest
  // greedy choice (top two logits) is 1.7e-4 apart, 470 times the largest
  // error measured (3.6e-7), so the tokens must agree.
  constexpr double kTolerance = 1e-5;
  for (const auto& backend : dsv4_golden::all_cpu_backends(2)) {
    CAPTURE(backend->name());
    const auto model = engine::DeepseekV4::load(fixture(), *backend);
    const int64_t vocab = model->config().vocab;
    for (const std::string c : {"a", "b"}) {
      CAPTURE(c);
      const std::vector<int32_t> prompt = ints(c + "_prompt", kGolden), want = ints(c + "_tokens", kGolden);
      const float* cached = array(c + "_logits", kGolden).as<float>();
      const float* full = array(c + "_full", kGolden).as<float>();
      engine::DeepseekV4State state;
      std::vector<float> logits = model->forward(state, prompt);
      std::vector<int32_t> got;
      Gap gap, gap_full;  // to transformers' cached steps, and to its forward of the whole sequence
      for (size_t step = 0; step < want.size(); ++step) {
        const std::span<const float> last(logits.end() - vocab, logits.end());
        gap.add(last, cached + step * vocab);
        gap_full.add(last, full + step * vocab);
        got.push_back(argmax(last));
        if (step + 1 < want.size()) logits = model->forward(state, std::span(&got.back(), 1));  // greedy
      }
      MESSAGE(backend->name() << " case " << c << ": " << want.size() << " steps, max abs error " << gap.max_abs
                              << " (largest |logit| " << gap.max_ref << ", relative " << gap.relative()
                              << "); to its full forward " << gap_full.max_abs);
      CHECK(gap.relative() < kTolerance);
      CHECK(gap_full.relative() < kTolerance);
      CHECK(got == want);
    }
  }
}

// Every position's keys, compressor inputs and entries are computed from the
// same rows by the same code whatever the call, so pieces differ from the
// whole only where a kernel sums a row's products in an order that depends on
// how many rows it is given: none of the scalar and AVX2 ones (bit for bit,
// measured), AVX-512's float matmul (BF16/F32 weights: the compressors, wo_a,
// the gate, the head) from 16 rows on (its panel path), 3.7e-7 of the largest
// logit measured. A piece handled wrong (a window, a pooled entry, a position)
// moves the logits by percents.
constexpr double kSamePieces = 2e-6;

TEST_CASE("deepseek_v4 fed in pieces gives the logits of one prefill of the whole sequence") {
  const std::vector<int32_t> tokens = ints("tokens", "dsv4_forward.bin");  // 160: past 127 and the window
  for (const auto& backend : dsv4_golden::all_cpu_backends(2)) {
    CAPTURE(backend->name());
    const auto model = engine::DeepseekV4::load(fixture(), *backend);
    const std::vector<float> whole = model->prefill(tokens);
    // One token a step; chunks across the window and the compressors' boundaries; a prompt, then steps.
    for (const std::vector<size_t>& sizes : {std::vector<size_t>{1}, {3, 17, 1, 50, 5, 60}, {126, 1}}) {
      CAPTURE(sizes[0]);
      Gap gap;
      gap.add(in_pieces(*model, tokens, sizes), whole.data());
      INFO(backend->name() << " pieces from " << sizes[0] << ": max abs difference " << gap.max_abs
                              << " (relative " << gap.relative() << ")");
      CHECK(gap.relative() < kSamePieces);
    }
  }
}

TEST_CASE("deepseek_v4 decoding several sequences in one call gives each the logits it gets alone") {
  // Prompts of 5, 130 and 40 tokens prefilled together, then one token each a
  // step, the shortest dropping out after 8 steps.
  const std::vector<int32_t> forward_tokens = ints("tokens", "dsv4_forward.bin");
  const std::vector<std::vector<int32_t>> prompts{
      ints("a_prompt", kGolden), ints("b_prompt", kGolden), {forward_tokens.begin(), forward_tokens.begin() + 40}};
  const std::vector<size_t> steps{24, 24, 8};
  for (const auto& backend : dsv4_golden::all_cpu_backends(2)) {
    CAPTURE(backend->name());
    const auto model = engine::DeepseekV4::load(fixture(), *backend);
    const int64_t vocab = model->config().vocab;

    // Alone: each sequence's logits, prompt and steps, greedy.
    std::vector<std::vector<float>> alone(prompts.size());
    std::vector<std::vector<int32_t>> alone_tokens(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
      engine::DeepseekV4State state;
      std::vector<float> logits = model->forward(state, prompts[i]);
      alone[i] = logits;
      for (size_t s = 0; s < steps[i]; ++s) {
        alone_tokens[i].push_back(argmax(std::span(logits).last(vocab)));
        logits = model->forward(state, std::span(&alone_tokens[i].back(), 1));
        alone[i].insert(alone[i].end(), logits.begin(), logits.end());
      }
    }

    std::vector<engine::DeepseekV4State> states(prompts.size());
    std::vector<std::vector<float>> together(prompts.size());
    std::vector<engine::DeepseekV4Feed> feeds;
    for (size_t i = 0; i < prompts.size(); ++i) feeds.push_back({&states[i], prompts[i]});
    std::vector<int32_t> next(prompts.size());
    for (size_t s = 0; !feeds.empty(); ++s) {
      const std::vector<float> logits = model->forward(feeds);
      std::vector<engine::DeepseekV4Feed> again;
      size_t row = 0;
      for (const auto& f : feeds) {
        const size_t i = size_t(f.state - states.data());
        const std::span<const float> mine = std::span(logits).subspan(row * vocab, f.tokens.size() * vocab);
        row += f.tokens.size();
        together[i].insert(together[i].end(), mine.begin(), mine.end());
        if (s == steps[i]) continue;
        next[i] = argmax(mine.last(vocab));
        CHECK(next[i] == alone_tokens[i][s]);
        again.push_back({f.state, std::span(&next[i], 1)});
      }
      feeds = again;
    }
    for (size_t i = 0; i < prompts.size(); ++i) {
      CAPTURE(i);
      CHECK(states[i].position == int64_t(prompts[i].size() + steps[i]));
      REQUIRE(together[i].size() == alone[i].size());
      Gap gap;
      gap.add(together[i], alone[i].data());
      INFO(backend->name() << " sequence " << i << " together vs alone: max abs difference " << gap.max_abs
                              << " (relative " << gap.relative() << ")");
      CHECK(gap.relative() < kSamePieces);
    }
  }
}

TEST_CASE("deepseek_v4 forward refuses a state of another model or a bad token, leaving the state as it was") {
  const auto backend = kernels::make_cpu_backend(1);
  const auto model = engine::DeepseekV4::load(fixture(), *backend);
  engine::DeepseekV4State state;
  const std::vector<int32_t> prompt{5, 6, 7};
  model->forward(state, prompt);
  const engine::DeepseekV4State before = state;
  const std::vector<int32_t> bad{int32_t(model->config().vocab)};
  CHECK_THROWS_WITH_AS(model->forward(state, bad), doctest::Contains("outside the vocabulary"),
                       std::invalid_argument);
  CHECK(state.position == before.position);
  CHECK(state.layers.size() == before.layers.size());

  engine::DeepseekV4State other;
  other.position = 4;
  other.layers.resize(2);
  CHECK_THROWS_WITH_AS(model->forward(other, prompt), doctest::Contains("a state of 2 layers for a model of 5"),
                       std::invalid_argument);
  CHECK(other.position == 4);

  const std::vector<engine::DeepseekV4Feed> twice{{&state, prompt}, {&state, prompt}};
  CHECK_THROWS_WITH_AS(model->forward(twice), doctest::Contains("the same state fed twice"), std::invalid_argument);
  CHECK(state.position == before.position);
}
