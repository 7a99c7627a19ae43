// DeepSeek-V4's manifold-constrained hyper-connections: the residual is hc
// parallel streams of the hidden width, collapsed into one input before each
// attention / feed-forward and expanded back after it. Host math in float32,
// one token at a time (streams: [hc][dim]).
#pragma once
#include <cstdint>
#include <vector>

namespace inferd::engine::dsv4 {

// A mixer `hc_*_{fn,base,scale}`: fn [mixes][hc * dim], base [mixes], scale [3]
// (the head's mixer: mixes hc, scale [1]).
struct HcMixer {
  const float* fn = nullptr;
  const float* base = nullptr;
  const float* scale = nullptr;
};

struct HcShape {
  int hc = 0;
  int64_t dim = 0;
  int sinkhorn_iters = 20;
  float eps = 1e-6f;       // hc_eps: the pre weights' floor and Sinkhorn's denominators
  float norm_eps = 1e-6f;  // rms_norm_eps of the streams' RMS
};

// What hc_pre hands hc_post: the expansion weights post [hc] and the stream
// mixing comb [hc][hc], doubly stochastic by Sinkhorn.
struct HcWeights {
  std::vector<float> post, comb;
};

// Collapses `streams` into `out` [dim] = sum_j pre_j * stream_j and returns post and comb.
HcWeights hc_pre(const HcShape& s, const HcMixer& m, const float* streams, float* out);
// streams_k = post_k * x + sum_j comb[j][k] * streams_j, in place (comb's transpose applied).
void hc_post(const HcShape& s, const HcWeights& w, const float* x, float* streams);
// The final collapse before the model's norm: pre_j = sigmoid(mix_j * scale + base_j) + eps, no Sinkhorn.
void hc_head(const HcShape& s, const HcMixer& m, const float* streams, float* out);

}  // namespace inferd::engine::dsv4
