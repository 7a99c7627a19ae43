// The forward pass against llama.cpp on the default model: next-token
// log-probabilities at two prompt positions and 64-token greedy continuations
// (tests/golden/model.json, made by tools/make_model_golden.py).
#include <doctest/doctest.h>

#include <boost/json.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/gguf_reader.hpp"
#include "engine/kv_cache.hpp"
#include "engine/model_registry.hpp"
#include "tests/unit/test_paths.hpp"

using namespace inferd;

namespace {

std::vector<float> log_softmax(const float* x, int n) {
  float mx = *std::max_element(x, x + n);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(double(x[i] - mx));
  std::vector<float> out(n);
  const double lse = mx + std::log(sum);
  for (int i = 0; i < n; ++i) out[i] = float(x[i] - lse);
  return out;
}

int argmax(const float* x, int n) { return int(std::max_element(x, x + n) - x); }

}  // namespace

TEST_CASE("llama forward matches the llama.cpp reference on the default model") {
  const auto model_path = test_paths::default_model();
  if (!std::filesystem::exists(model_path)) {
    FAIL("default model missing at " << model_path << " (run tools/bootstrap.sh)");
  }
  std::ifstream in(test_paths::source_dir() + "/tests/golden/model.json");
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  auto golden = boost::json::parse(ss.str()).as_object();

  auto backend = kernels::make_cpu_backend(0);
  auto file = engine::GgufFile::open(model_path);
  auto model = engine::load_model(*file, *backend);
  const auto& mc = model->config();
  engine::KvGeometry g{mc.n_layers, mc.n_kv_heads, mc.head_dim, 16, 64, kernels::DType::F16};
  engine::KvCache kv(g);
  std::vector<int32_t> table(64);
  for (int i = 0; i < 64; ++i) table[i] = i;
  std::vector<float> logits;

  for (const auto& cv : golden.at("cases").as_array()) {
    const auto& c = cv.as_object();
    std::vector<int32_t> ids;
    for (const auto& t : c.at("ids").as_array()) ids.push_back(int32_t(t.as_int64()));
    CAPTURE(c.at("prompt").as_string());

    engine::StepBatch b;
    for (size_t i = 0; i < ids.size(); ++i)
      b.add(ids[i], int32_t(i), table.data(), i == 0 || i == 9 || i + 1 == ids.size());
    logits.resize(b.logits_rows.size() * size_t(mc.vocab));
    model->forward(b, kv, logits.data());

    // Log-probabilities agree within 0.1 nats for the reference's top 10 (Q8
    // activation rounding and summation order differ between the two engines).
    for (auto [pos, row] : {std::pair{"0", 0}, std::pair{"9", 1}}) {
      auto lp = log_softmax(logits.data() + size_t(row) * mc.vocab, mc.vocab);
      for (const auto& e : c.at("top_logprobs").at(pos).as_array()) {
        const int tok = int(e.as_array()[0].as_int64());
        const double ref = e.as_array()[1].to_number<double>();
        CAPTURE(pos);
        CAPTURE(tok);
        CHECK(std::abs(lp[tok] - ref) < 0.1);
      }
    }

    // 64 greedy tokens, one decode step each, must be identical.
    std::vector<int32_t> got;
    int next = argmax(logits.data() + (b.logits_rows.size() - 1) * size_t(mc.vocab), mc.vocab);
    int pos = int(ids.size());
    const auto& want = c.at("greedy").as_array();
    for (size_t i = 0; i < want.size(); ++i) {
      got.push_back(next);
      engine::StepBatch d;
      d.add(next, pos++, table.data(), true);
      model->forward(d, kv, logits.data());
      next = argmax(logits.data(), mc.vocab);
    }
    std::vector<int32_t> expect;
    for (const auto& t : want) expect.push_back(int32_t(t.as_int64()));
    CHECK(got == expect);
  }
}
