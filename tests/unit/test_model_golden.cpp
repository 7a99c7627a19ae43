// The Llama forward pass on the default model against two independent references:
//  - exact precision (F32 weights, activations, KV) vs PyTorch/transformers in
//    float32 (tests/golden/model_f32.json, tools/make_f32_golden.py): log-probs
//    within 2e-3 and 64 greedy tokens identical;
//  - fast precision (quantized weights, Q8 activations, F16 KV) vs llama.cpp
//    (tests/golden/model.json, tools/make_model_golden.py). Both engines round
//    activations to 8 bits, and the two roundings differ in the last bit often
//    enough that logits drift by up to ~1 nat on a 135M model (llama.cpp itself is
//    that far from float32), so exact greedy equality is not a property either
//    engine has. Checked instead, teacher-forced along llama.cpp's 64 greedy
//    tokens: our choice equals its choice at >= 90% of steps, and where it
//    differs the two candidates are within 0.75 logits under our numerics.
#include <doctest/doctest.h>

#include <boost/json.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/gguf_reader.hpp"
#include "engine/kv/kv_cache.hpp"
#include "engine/models/model_registry.hpp"
#include "tests/unit/test_paths.hpp"

using namespace inferd;

namespace {

boost::json::object load_golden(const std::string& name) {
  std::ifstream in(test_paths::source_dir() + "/tests/golden/" + name);
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  return boost::json::parse(ss.str()).as_object();
}

std::vector<int32_t> ints(const boost::json::value& v) {
  std::vector<int32_t> out;
  for (const auto& t : v.as_array()) out.push_back(int32_t(t.as_int64()));
  return out;
}

std::vector<double> log_softmax(const float* x, int n) {
  const float mx = *std::max_element(x, x + n);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(double(x[i]) - mx);
  const double lse = mx + std::log(sum);
  std::vector<double> out(n);
  for (int i = 0; i < n; ++i) out[i] = x[i] - lse;
  return out;
}

int argmax(const float* x, int n) { return int(std::max_element(x, x + n) - x); }

// One model, one KV cache; each case prefills its prompt then decodes token by token.
struct Runner {
  std::unique_ptr<kernels::Backend> backend =
      kernels::make_cpu_backend(std::getenv("INFERD_TEST_THREADS") ? std::atoi(std::getenv("INFERD_TEST_THREADS")) : 0);
  std::unique_ptr<engine::GgufFile> file;
  std::unique_ptr<engine::Model> model;
  std::unique_ptr<engine::KvCache> kv;
  std::vector<int32_t> table;
  std::vector<float> logits;
  int vocab = 0;

  explicit Runner(engine::Precision p) {
    const auto path = test_paths::default_model();
    REQUIRE_MESSAGE(std::filesystem::exists(path), "default model missing at " << path << " (run tools/bootstrap.sh)");
    file = engine::GgufFile::open(path);
    model = engine::load_model(*file, *backend, p);
    const auto& mc = model->config();
    vocab = mc.vocab;
    kv = std::make_unique<engine::KvCache>(engine::KvGeometry{
        mc.n_layers, mc.n_kv_heads, mc.head_dim, 16, 16,
        p == engine::Precision::Exact ? kernels::DType::F32 : kernels::DType::F16}, *backend);
    for (int i = 0; i < 16; ++i) table.push_back(i);
  }
  // Prefill; returns logits rows for positions 0, 9 and the last prompt token.
  const float* prefill(const std::vector<int32_t>& ids) {
    engine::StepBatch b;
    const int32_t t = b.add_table(table);
    for (size_t i = 0; i < ids.size(); ++i) b.add(ids[i], int32_t(i), t, i == 0 || i == 9 || i + 1 == ids.size());
    logits.resize(3 * size_t(vocab));
    model->forward(b, *kv, logits.data());
    return logits.data();
  }
  const float* decode(int32_t tok, int pos) {
    engine::StepBatch b;
    b.add(tok, pos, b.add_table(table), true);
    model->forward(b, *kv, logits.data());
    return logits.data();
  }
};

}  // namespace

TEST_CASE("exact precision matches transformers float32 on the default model" * doctest::test_suite("whole_model")) {
  Runner r(engine::Precision::Exact);
  const auto golden = load_golden("model_f32.json");
  for (const auto& cv : golden.at("cases").as_array()) {
    const auto& c = cv.as_object();
    CAPTURE(c.at("prompt").as_string());
    const auto ids = ints(c.at("ids"));
    const float* l = r.prefill(ids);
    for (const auto& [at, row] : {std::pair{"0", 0}, std::pair{"9", 1}}) {
      const char* pos = at;  // a plain variable: CAPTURE's lambda cannot name a structured binding (clang)
      const auto lp = log_softmax(l + size_t(row) * r.vocab, r.vocab);
      for (const auto& e : c.at("top_logprobs").at(pos).as_array()) {
        const int tok = int(e.as_array()[0].as_int64());
        CAPTURE(pos);
        CAPTURE(tok);
        CHECK(std::abs(lp[tok] - e.as_array()[1].to_number<double>()) < 2e-3);
      }
    }
    std::vector<int32_t> got;
    int next = argmax(l + 2 * size_t(r.vocab), r.vocab);
    int pos = int(ids.size());
    for (size_t i = 0; i < 64; ++i) {
      got.push_back(next);
      next = argmax(r.decode(next, pos++), r.vocab);
    }
    CHECK(got == ints(c.at("greedy")));
  }
}

TEST_CASE("fast precision stays within quantization noise of llama.cpp" * doctest::test_suite("whole_model")) {
  Runner r(engine::Precision::Fast);
  int steps = 0, agree = 0;
  const auto golden = load_golden("model.json");
  for (const auto& cv : golden.at("cases").as_array()) {
    const auto& c = cv.as_object();
    CAPTURE(c.at("prompt").as_string());
    const auto ids = ints(c.at("ids"));
    const float* l = r.prefill(ids);
    for (const auto& [at, row] : {std::pair{"0", 0}, std::pair{"9", 1}}) {
      const char* pos = at;  // a plain variable: CAPTURE's lambda cannot name a structured binding (clang)
      const auto lp = log_softmax(l + size_t(row) * r.vocab, r.vocab);
      double sum = 0;
      const auto& top = c.at("top_logprobs").at(pos).as_array();
      for (const auto& e : top) sum += std::abs(lp[e.as_array()[0].as_int64()] - e.as_array()[1].to_number<double>());
      CAPTURE(pos);
      CHECK(sum / double(top.size()) < 0.25);
    }
    const auto want = ints(c.at("greedy"));
    const float* cur = l + 2 * size_t(r.vocab);
    int pos = int(ids.size());
    for (int32_t ref : want) {
      const int ours = argmax(cur, r.vocab);
      ++steps;
      if (ours == ref) ++agree;
      CAPTURE(pos);
      CHECK(cur[ours] - cur[ref] < 0.75f);
      cur = r.decode(ref, pos++);  // teacher forcing: stay on the reference's path
    }
  }
  CHECK(agree >= steps * 9 / 10);
  MESSAGE("greedy agreement with llama.cpp: " << agree << "/" << steps);
}
