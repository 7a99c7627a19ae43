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
  // 2.7e-7 of its own full forward (the golden script prints it).
  constexpr double kTolerance = 1e-5;
  for (const auto& backend : dsv4_golden::all_cpu_backends(2)) {
    CAPTURE(backend->name());
    const auto model = engine::DeepseekV4::load(fixture(), *backend);
    const int64_t vocab = model->config().vocab;
    for (const std::string c : {"a", "b"}) {
      CAPTURE(c);
      const std::vector<int32_t> prompt = ints(c + "_prompt", kGolden), want = ints(c + "_tokens", kGolden);
      const float* ref = array(c + "_logits", kGolden).as<float>();
      engine::DeepseekV4State state;
      std::vector<float> logits = model->forward(state, prompt);
      std::vector<int32_t> got;
      Gap gap;
      for (size_t step = 0; step < want.size(); ++step) {
        const std::span<const float> last(logits.end() - vocab, logits.end());
        gap.add(last, ref + step * vocab);
        got.push_back(argmax(last));
        logits = model->forward(state, std::span(&got.back(), 1));  // our own token: a greedy continuation
      }
      MESSAGE(backend->name() << " case " << c << ": " << want.size() << " steps, max abs error " << gap.max_abs
                              << " (largest |logit| " << gap.max_ref << ", relative " << gap.relative() << ")");
      CHECK(gap.relative() < kTolerance);
      CHECK(got == want);
    }
  }
}

TEST_CASE("deepseek_v4 fed in pieces gives the logits of one prefill of the whole sequence") {
  // Every position's keys, compressor inputs and entries are computed from the
  // same rows by the same code whatever the piece, and each row of a matmul
  // is its own dot products, so the pieces agree with the whole bit for bit.
  const auto backend = kernels::make_cpu_backend(2);
  const auto model = engine::DeepseekV4::load(fixture(), *backend);
  const std::vector<int32_t> tokens = ints("tokens", "dsv4_forward.bin");  // 160: past 127 and the window
  const std::vector<float> whole = model->prefill(tokens);
  SUBCASE("one token a step") { CHECK(in_pieces(*model, tokens, {1}) == whole); }
  SUBCASE("chunks across the window and the compressors' boundaries") {
    CHECK(in_pieces(*model, tokens, {3, 17, 1, 50, 5, 60}) == whole);
  }
  SUBCASE("a prompt, then one token a step") { CHECK(in_pieces(*model, tokens, {126, 1}) == whole); }
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
}
