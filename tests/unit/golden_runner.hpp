// A model on the CPU backend against a golden file of transformers' answers
// (tools/make_hf_golden.py's layout: per prompt its ids, probe logits, argmax,
// logsumexp and greedy tokens), for the tests of each model format and architecture.
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <boost/json.hpp>
#include <cmath>
#include <fstream>
#include <sstream>
#include <memory>
#include <string>
#include <vector>

#include "engine/gguf_reader.hpp"
#include "engine/hf_checkpoint.hpp"
#include "engine/kv/kv_cache.hpp"
#include "engine/models/model_registry.hpp"

namespace test_golden {

using namespace inferd;

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot read " << path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::vector<int32_t> ints(const boost::json::value& v) {
  std::vector<int32_t> out;
  for (const auto& t : v.as_array()) out.push_back(int32_t(t.as_int64()));
  return out;
}

inline int argmax(const float* x, int n) { return int(std::max_element(x, x + n) - x); }

// One model (on the CPU backend unless given another); run() prefills a prompt
// with logits at every position.
struct Runner {
  std::unique_ptr<kernels::Backend> backend;
  std::unique_ptr<engine::GgufFile> file;
  std::unique_ptr<engine::Model> model;
  std::unique_ptr<engine::KvCache> kv;
  std::vector<int32_t> table;
  std::vector<float> logits;
  int vocab = 0;

  // `path`: a GGUF file or a checkpoint directory.
  explicit Runner(const std::string& path, engine::Precision p = engine::Precision::Exact,
                  std::unique_ptr<kernels::Backend> on = kernels::make_cpu_backend(1))
      : backend(std::move(on)) {
    file = engine::open_model(path);
    model = engine::load_model(*file, *backend, p);
    const auto& mc = model->config();
    vocab = mc.vocab;
    kv = std::make_unique<engine::KvCache>(
        engine::KvGeometry{mc.n_layers, mc.n_kv_heads, mc.head_dim, 16, 8,
                           p == engine::Precision::Exact ? kernels::DType::F32 : kernels::DType::F16},
        *backend);
    for (int i = 0; i < 8; ++i) table.push_back(i);
  }
  const float* run(const std::vector<int32_t>& ids) {
    engine::StepBatch b;
    const int32_t t = b.add_table(table);
    for (size_t i = 0; i < ids.size(); ++i) b.add(ids[i], int32_t(i), t, true);
    logits.resize(ids.size() * size_t(vocab));
    model->forward(b, *kv, logits.data());
    return logits.data();
  }
  std::vector<int32_t> greedy(const std::vector<int32_t>& ids, int n) {
    const float* l = run(ids);
    int next = argmax(l + (ids.size() - 1) * size_t(vocab), vocab);
    std::vector<int32_t> got;
    for (int pos = int(ids.size()); int(got.size()) < n; ++pos) {
      got.push_back(next);
      engine::StepBatch b;
      b.add(next, pos, b.add_table(table), true);
      model->forward(b, *kv, logits.data());
      next = argmax(logits.data(), vocab);
    }
    return got;
  }
};

// Max |ours - transformers| over the probe logits and log-sum-exps of every position.
inline double compare(Runner& r, const boost::json::object& c, const boost::json::array& probes, bool check_argmax) {
  const auto ids = ints(c.at("ids"));
  const float* l = r.run(ids);
  double worst = 0;
  for (size_t pos = 0; pos < ids.size(); ++pos) {
    const float* row = l + pos * size_t(r.vocab);
    const auto& want = c.at("probe_logits").as_array()[pos].as_array();
    for (size_t k = 0; k < probes.size(); ++k)
      worst = std::max(worst, std::abs(row[probes[k].as_int64()] - want[k].to_number<double>()));
    const float mx = *std::max_element(row, row + r.vocab);
    double sum = 0;
    for (int i = 0; i < r.vocab; ++i) sum += std::exp(double(row[i]) - mx);
    worst = std::max(worst, std::abs(mx + std::log(sum) - c.at("logsumexp").as_array()[pos].to_number<double>()));
    if (check_argmax) {
      CAPTURE(pos);
      CHECK(argmax(row, r.vocab) == c.at("argmax").as_array()[pos].as_int64());
    }
  }
  return worst;
}

inline boost::json::object read_golden(const std::string& path) { return boost::json::parse(read_text(path)).as_object(); }

// Every case of a golden file: logits within `tol` of transformers' (and, in
// exact precision, the same argmax at every position) and the same 16 greedy tokens.
inline void check_cases(Runner& r, const boost::json::object& g, bool exact, double tol, const std::string& label) {
  REQUIRE(r.vocab == g.at("vocab").as_int64());
  for (const auto& cv : g.at("cases").as_array()) {
    const auto& c = cv.as_object();
    CAPTURE(label);
    CAPTURE(c.at("prompt").as_string());
    const double worst = compare(r, c, g.at("probes").as_array(), exact);
    MESSAGE(label << ": max |logit diff| " << worst);
    CHECK(worst < tol);
    CHECK(r.greedy(ints(c.at("ids")), 16) == ints(c.at("greedy")));
  }
}

// The load error of a model (a GGUF file or a checkpoint directory) on
// `backend` (the CPU backend by default), or "(loaded)".
inline std::string load_error(const std::string& path, kernels::Backend* backend = nullptr) {
  const auto cpu = backend ? nullptr : kernels::make_cpu_backend(1);
  try {
    auto file = engine::open_model(path);
    engine::load_model(*file, backend ? *backend : *cpu);
  } catch (const engine::LoadError& e) {
    return e.what();
  }
  return "(loaded)";
}

// That loading `path` on `backend` (the CPU backend by default) fails naming
// the file and saying `why`.
inline void check_refused(const std::string& path, const std::string& why, kernels::Backend* backend = nullptr) {
  const std::string e = load_error(path, backend);
  CHECK_MESSAGE(e.find(path) != std::string::npos, e);
  CHECK_MESSAGE(e.find(why) != std::string::npos, e);
}

}  // namespace test_golden
