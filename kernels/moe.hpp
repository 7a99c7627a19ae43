// The routed feed-forward of a mixture of experts as DeepSeek-V4 runs it, as
// plain values for Backend::moe_route / moe_experts, and the host functions
// that compute them (the CPU backend's, and the reference for others).
//
// Routing, per token, from the router's logits (x . gate^T, n_experts of them):
//   score = sqrt(softplus(logit))                       (scoring_func sqrtsoftplus)
//   ids   = top_k of score + bias                       (noaux_tc: bias selects only)
//         or tid2eid[token id]                          (hash routing, the first layers)
//   weight_j = score[ids_j] / sum_j score[ids_j] * routed_scale
// Experts: y = sum_j weight_j * w2_e(silu(min(w1_e x, L)) * clamp(w3_e x, -L, L)),
// e = ids_j, the weight applied before w2 like the reference.
#pragma once
#include <cstdint>
#include <span>

#include "kernels/scaled_weight.hpp"

namespace inferd::kernels {

struct MoeRouting {
  int n_experts = 0;
  int top_k = 0;
  float routed_scale = 1.0f;           // routed_scaling_factor
  const float* bias = nullptr;         // [n_experts] e_score_correction_bias; null: none
  const int64_t* tid2eid = nullptr;    // hash routing: [vocab][top_k]; null: by score
  int64_t vocab = 0;                   // rows of tid2eid
};

// One expert's SwiGLU weights: w1 (gate) and w3 (up) [inter, dim], w2 (down) [dim, inter].
struct ExpertWeights {
  ScaledWeightView w1, w2, w3;
};

// Routes n_tokens tokens: logits [n_tokens][n_experts] -> ids and weights
// [n_tokens][top_k], by score in descending order of score + bias. token_ids
// (hash routing only) are the tokens' ids in the vocabulary. Throws
// std::invalid_argument for a token id outside tid2eid or an expert id outside
// [0, n_experts) in it, naming them.
void route_tokens(const MoeRouting& r, const float* logits, int64_t n_tokens, const int32_t* token_ids, int32_t* ids,
                  float* weights);

// out[i] = weight * silu(min(gate[i], limit)) * clamp(up[i], -limit, limit) for
// i < n; limit <= 0: no clamp.
void swiglu_limited(const float* gate, const float* up, float weight, float limit, float* out, int64_t n);

// Throws std::invalid_argument unless every expert's shapes chain: w1 and w3
// [inter, dim], w2 [dim, inter], the same for all.
void check_experts(std::span<const ExpertWeights> experts, const char* op);

}  // namespace inferd::kernels
