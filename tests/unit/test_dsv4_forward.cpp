// DeepSeek-V4's forward pass (engine/models/deepseek_v4.hpp) on the committed
// tiny checkpoint (tests/golden/dsv4-tiny) against transformers' model run in
// float32 on the same dequantized weights (tests/golden/dsv4_forward.bin, from
// tools/make_dsv4_forward_golden.py): a 160-token prefill through window-only,
// ratio-4 (indexer) and ratio-128 layers, hash- and score-routed experts.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/gguf_reader.hpp"  // LoadError
#include "engine/models/deepseek_v4.hpp"
#include "tests/unit/dsv4_golden.hpp"
#include "tests/unit/golden_runner.hpp"
#include "tests/unit/safetensors_scratch.hpp"
#include "tests/unit/test_paths.hpp"

using namespace inferd;
using dsv4_golden::array;

namespace {

const std::string kGolden = "dsv4_forward.bin";

std::string fixture() { return test_paths::source_dir() + "/tests/golden/dsv4-tiny"; }

struct Error {
  double max_abs = 0, max_ref = 0;
  double relative() const { return max_abs / max_ref; }  // to the largest reference magnitude
};

Error compare(const std::vector<float>& got, const dsv4_golden::Array& want) {
  const float* w = want.as<float>();
  REQUIRE(got.size() * 4 == want.bytes.size());
  Error e;
  for (size_t i = 0; i < got.size(); ++i) {
    e.max_abs = std::max(e.max_abs, std::fabs(double(got[i]) - w[i]));
    e.max_ref = std::max(e.max_ref, std::fabs(double(w[i])));
  }
  return e;
}

}  // namespace

TEST_CASE("deepseek_v4 prefill matches transformers' model in float32") {
  // Both sides compute in float32 from the same weights, in different orders
  // (dot products of up to 128 terms, exp, rsqrt, 20 Sinkhorn rounds), so they
  // differ by rounding only: a few float32 ulps (1.2e-7) per op, compounded
  // over 5 layers; measured 5e-7 of the largest logit. A wrong formula moves
  // them by percents (leaving out the ratio-128 entry: 18% of the largest
  // logit). 1e-5 of the largest value sits between, with room for each
  // instruction set's own summation order.
  constexpr double kTolerance = 1e-5;
  const auto& tok = array("tokens", kGolden);
  const std::vector<int32_t> tokens(tok.as<int32_t>(), tok.as<int32_t>() + tok.dim(0));
  for (const auto& backend : dsv4_golden::all_cpu_backends(2)) {
    CAPTURE(backend->name());
    const auto model = engine::DeepseekV4::load(fixture(), *backend);
    std::vector<std::vector<float>> streams;
    const std::vector<float> logits = model->prefill(tokens, &streams);
    REQUIRE(streams.size() == size_t(model->config().layers));
    for (size_t l = 0; l < streams.size(); ++l) {
      const Error e = compare(streams[l], array("hidden_" + std::to_string(l), kGolden));
      INFO("layer " << l << ": max abs error " << e.max_abs << ", relative " << e.relative());
      CHECK(e.relative() < kTolerance);
    }
    const Error e = compare(logits, array("logits", kGolden));
    MESSAGE(backend->name() << " logits: max abs error " << e.max_abs << " (largest |logit| " << e.max_ref
                            << ", relative " << e.relative() << ")");
    CHECK(e.relative() < kTolerance);
  }
}

TEST_CASE("deepseek_v4 prefill refuses a token outside the vocabulary") {
  const auto backend = kernels::make_cpu_backend(1);
  const auto model = engine::DeepseekV4::load(fixture(), *backend);
  const std::vector<int32_t> tokens{1, int32_t(model->config().vocab)};
  CHECK_THROWS_WITH_AS(model->prefill(tokens), doctest::Contains("outside the vocabulary"), std::invalid_argument);
}

TEST_CASE("deepseek_v4 load refuses what it cannot run, naming the file and the key or tensor") {
  const auto backend = kernels::make_cpu_backend(1);
  test_scratch::Scratch s(fixture(), "dsv4fwd");
  const std::string config = test_golden::read_text(s.path("config.json"));

  SUBCASE("rope_scaling of another type") {
    std::string edited = config;
    const std::string yarn = "\"type\": \"yarn\"";
    REQUIRE(edited.find(yarn) != std::string::npos);
    edited.replace(edited.find(yarn), yarn.size(), "\"type\": \"linear\"");
    test_scratch::write_text(s.path("config.json"), edited);
    CHECK_THROWS_WITH_AS(engine::DeepseekV4::load(s.path(), *backend),
                         doctest::Contains("key 'rope_scaling.type': only \"yarn\" is supported"), engine::LoadError);
  }
  SUBCASE("a checkpoint that fails the gate") {
    std::filesystem::remove(s.path("model-00002-of-00003.safetensors"));
    CHECK_THROWS_WITH_AS(engine::DeepseekV4::load(s.path(), *backend),
                         doctest::Contains("model-00002-of-00003.safetensors"), engine::LoadError);
  }
}
