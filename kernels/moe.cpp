#include "kernels/moe.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

namespace inferd::kernels {
namespace {

// torch.nn.functional.softplus: log(1 + e^x), x itself above 20.
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

}  // namespace

void route_tokens(const MoeRouting& r, const float* logits, int64_t n_tokens, const int32_t* token_ids, int32_t* ids,
                  float* weights) {
  if (r.n_experts <= 0 || r.top_k <= 0 || r.top_k > r.n_experts)
    throw std::invalid_argument("moe_route: top_k " + std::to_string(r.top_k) + " of " + std::to_string(r.n_experts) +
                                " experts");
  if (r.tid2eid && !token_ids) throw std::invalid_argument("moe_route: hash routing without token ids");
  std::vector<float> score(r.n_experts), pick(r.n_experts);
  std::vector<int32_t> order(r.n_experts);
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* l = logits + t * r.n_experts;
    for (int e = 0; e < r.n_experts; ++e) {
      score[e] = std::sqrt(softplus(l[e]));
      pick[e] = r.bias ? score[e] + r.bias[e] : score[e];
    }
    int32_t* id = ids + t * r.top_k;
    if (r.tid2eid) {
      const int32_t tok = token_ids[t];
      if (tok < 0 || tok >= r.vocab)
        throw std::invalid_argument("moe_route: token id " + std::to_string(tok) + " outside tid2eid's " +
                                    std::to_string(r.vocab) + " rows");
      for (int j = 0; j < r.top_k; ++j) {
        const int64_t e = r.tid2eid[int64_t(tok) * r.top_k + j];
        if (e < 0 || e >= r.n_experts)
          throw std::invalid_argument("moe_route: tid2eid[" + std::to_string(tok) + "][" + std::to_string(j) +
                                      "] = " + std::to_string(e) + " is not an expert of " +
                                      std::to_string(r.n_experts));
        id[j] = static_cast<int32_t>(e);
      }
    } else {
      // Highest first; equal values by lower expert id.
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + r.top_k, order.end(),
                        [&](int32_t a, int32_t b) { return pick[a] > pick[b] || (pick[a] == pick[b] && a < b); });
      std::copy(order.begin(), order.begin() + r.top_k, id);
    }
    float sum = 0;
    for (int j = 0; j < r.top_k; ++j) sum += score[id[j]];
    for (int j = 0; j < r.top_k; ++j) weights[t * r.top_k + j] = score[id[j]] / sum * r.routed_scale;
  }
}

void swiglu_limited(const float* gate, const float* up, float weight, float limit, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float g = gate[i], u = up[i];
    if (limit > 0) g = std::min(g, limit), u = std::clamp(u, -limit, limit);
    out[i] = weight * (g / (1.0f + std::exp(-g)) * u);
  }
}

void check_experts(std::span<const ExpertWeights> experts, const char* op) {
  if (experts.empty()) throw std::invalid_argument(std::string(op) + ": no experts");
  const int64_t inter = experts[0].w1.rows, dim = experts[0].w1.cols;
  for (size_t e = 0; e < experts.size(); ++e) {
    const ExpertWeights& x = experts[e];
    const auto shape = [](const ScaledWeightView& w) {
      return "[" + std::to_string(w.rows) + ", " + std::to_string(w.cols) + "]";
    };
    if (x.w1.rows != inter || x.w1.cols != dim || x.w3.rows != inter || x.w3.cols != dim || x.w2.rows != dim ||
        x.w2.cols != inter)
      throw std::invalid_argument(std::string(op) + ": expert " + std::to_string(e) + " has w1 " + shape(x.w1) +
                                  ", w3 " + shape(x.w3) + ", w2 " + shape(x.w2) + "; expected w1 and w3 [" +
                                  std::to_string(inter) + ", " + std::to_string(dim) + "], w2 [" +
                                  std::to_string(dim) + ", " + std::to_string(inter) + "]");
    for (const ScaledWeightView* w : {&x.w1, &x.w2, &x.w3}) check_view(*w, op);
  }
}

}  // namespace inferd::kernels
