// DeepSeek-V4's routed experts (kernels/moe.hpp, Backend::moe_route and
// moe_experts) against its reference model's Gate and Expert run by PyTorch
// (tests/golden/dsv4_quant.bin, from tools/make_dsv4_quant_golden.py): routing
// by score with the selection-only bias, hash routing, the clamped SwiGLU.
#include <doctest/doctest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/moe.hpp"
#include "tests/unit/dsv4_golden.hpp"

using namespace inferd::kernels;
using dsv4_golden::all_cpu_backends;
using dsv4_golden::array;

namespace {

struct MoeCase {
  int64_t n_experts, top_k, tokens, dim;
  std::vector<ExpertWeights> experts;
  MoeRouting routing;

  MoeCase() {
    const auto& w1 = array("moe_w1");
    const auto& w2 = array("moe_w2");
    n_experts = w1.dim(0), top_k = array("moe_score_ids").dim(1), tokens = array("moe_x").dim(0);
    dim = w1.dim(2) * 2;
    const int64_t inter = w1.dim(1);
    auto view = [](const std::string& w, const std::string& s, int64_t e) {
      const auto& a = array(w);
      const int64_t rows = a.dim(1), cols = a.dim(2) * 2;
      return ScaledWeightView{ScaledFormat::Mxfp4, ScaleType::E8M0, a.bytes.data() + e * rows * cols / 2,
                              array(s).bytes.data() + e * rows * cols / 32, rows, cols};
    };
    for (int64_t e = 0; e < n_experts; ++e)
      experts.push_back({view("moe_w1", "moe_s1", e), view("moe_w2", "moe_s2", e), view("moe_w3", "moe_s3", e)});
    CHECK(w2.dim(1) == dim);
    CHECK(experts[0].w2.cols == inter);
    routing.n_experts = static_cast<int>(n_experts);
    routing.top_k = static_cast<int>(top_k);
    routing.routed_scale = 1.5f;
    routing.bias = array("moe_bias").as<float>();
  }
};

void check_route(Backend& be, const MoeRouting& r, const MoeCase& c, const std::string& name) {
  std::vector<int32_t> ids(c.tokens * c.top_k);
  std::vector<float> weights(ids.size());
  be.moe_route(r, array("moe_logits").as<float>(), c.tokens, array("moe_token_ids").as<int32_t>(), ids.data(),
               weights.data());
  const int32_t* want_ids = array("moe_" + name + "_ids").as<int32_t>();
  const float* want_w = array("moe_" + name + "_weights").as<float>();
  for (size_t i = 0; i < ids.size(); ++i) {
    CHECK_MESSAGE(ids[i] == want_ids[i], name, " slot ", i);
    CHECK_MESSAGE(std::fabs(weights[i] - want_w[i]) <= 1e-6f * std::fabs(want_w[i]), name, " weight ", i);
  }
}

}  // namespace

TEST_CASE("moe_route: sqrtsoftplus scores, the bias selects only, weights normalized and scaled; hash routing") {
  MoeCase c;
  for (auto& be : all_cpu_backends(1)) {
    check_route(*be, c.routing, c, "score");
    MoeRouting hash = c.routing;
    hash.tid2eid = array("moe_tid2eid").as<int64_t>();
    hash.vocab = array("moe_tid2eid").dim(0);
    check_route(*be, hash, c, "hash");
  }
}

TEST_CASE("moe_experts: clamped SwiGLU experts, weighted before w2, on every instruction set") {
  MoeCase c;
  const float limit = array("moe_limit").as<float>()[0];
  const float* x = array("moe_x").as<float>();
  for (const char* name : {"score", "hash"}) {
    const float* want = array(std::string("moe_") + name + "_y").as<float>();
    float scale = 0;
    for (int64_t i = 0; i < c.tokens * c.dim; ++i) scale = std::fmax(scale, std::fabs(want[i]));
    for (auto& be : all_cpu_backends(2)) {
      std::vector<float> y(c.tokens * c.dim, NAN);
      be->moe_experts(c.experts, limit, x, c.tokens, static_cast<int>(c.top_k),
                      array(std::string("moe_") + name + "_ids").as<int32_t>(),
                      array(std::string("moe_") + name + "_weights").as<float>(), y.data());
      float worst = 0;
      for (size_t i = 0; i < y.size(); ++i) worst = std::fmax(worst, std::fabs(y[i] - want[i]));
      CHECK_MESSAGE(worst <= 1e-5f * scale, be->name(), " ", name, ": worst ", worst, " of ", scale);
    }
  }
  // Without the clamp the result differs: the limit bites in this case.
  auto be = make_cpu_backend(1, CpuIsa::Auto);
  std::vector<float> y(c.tokens * c.dim);
  be->moe_experts(c.experts, 0.0f, x, c.tokens, static_cast<int>(c.top_k), array("moe_score_ids").as<int32_t>(),
                  array("moe_score_weights").as<float>(), y.data());
  float diff = 0;
  for (size_t i = 0; i < y.size(); ++i) diff = std::fmax(diff, std::fabs(y[i] - array("moe_score_y").as<float>()[i]));
  CHECK(diff > 1e-3f);
}

TEST_CASE("moe ops refuse bad routing tables and expert ids, naming them") {
  MoeCase c;
  auto be = make_cpu_backend(1, CpuIsa::Auto);
  std::vector<int32_t> ids(c.top_k);
  std::vector<float> weights(c.top_k, 1.0f), y(c.dim);
  MoeRouting hash = c.routing;
  hash.tid2eid = array("moe_tid2eid").as<int64_t>();
  hash.vocab = array("moe_tid2eid").dim(0);
  const int32_t far = 10;
  CHECK_THROWS_WITH_AS(be->moe_route(hash, array("moe_logits").as<float>(), 1, &far, ids.data(), weights.data()),
                       doctest::Contains("token id 10 outside tid2eid's 10 rows"), std::invalid_argument);
  const std::vector<int32_t> bad = {0, 1, 6};
  CHECK_THROWS_WITH_AS(be->moe_experts(c.experts, 1.0f, array("moe_x").as<float>(), 1, 3, bad.data(), weights.data(),
                                       y.data()),
                       doctest::Contains("routed to expert 6 of 6"), std::out_of_range);
  std::vector<ExpertWeights> odd = c.experts;
  odd[2].w2.cols = 64;
  CHECK_THROWS_WITH_AS(be->moe_experts(odd, 1.0f, array("moe_x").as<float>(), 1, 3, ids.data(), weights.data(),
                                       y.data()),
                       doctest::Contains("expert 2 has w1 [32, 64], w3 [32, 64], w2 [64, 64]"), std::invalid_argument);
}
