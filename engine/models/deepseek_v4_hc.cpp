#include "engine/models/deepseek_v4_hc.hpp"

#include <algorithm>
#include <cmath>

namespace inferd::engine::dsv4 {
namespace {

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// mixes[m] = (streams . fn[m]) / rms(streams) for m < n: the mixer reads the streams RMS-normalized.
std::vector<float> mixes(const HcShape& s, const HcMixer& m, const float* streams, int n) {
  const int64_t width = s.hc * s.dim;
  double sq = 0;
  for (int64_t i = 0; i < width; ++i) sq += double(streams[i]) * streams[i];
  const float r = 1.0f / std::sqrt(float(sq / double(width)) + s.norm_eps);
  std::vector<float> out(n);
  for (int j = 0; j < n; ++j) {
    const float* f = m.fn + j * width;
    double acc = 0;
    for (int64_t i = 0; i < width; ++i) acc += double(streams[i]) * f[i];
    out[j] = float(acc) * r;
  }
  return out;
}

void collapse(const HcShape& s, const std::vector<float>& pre, const float* streams, float* out) {
  for (int64_t i = 0; i < s.dim; ++i) {
    float acc = 0;
    for (int j = 0; j < s.hc; ++j) acc += pre[j] * streams[j * s.dim + i];
    out[i] = acc;
  }
}

// Row softmax (+ eps), column normalization, then iters - 1 rounds of row and
// column normalization, each denominator + eps: comb[j][k], rows j.
void sinkhorn(const HcShape& s, float* c) {
  const int n = s.hc;
  const auto rows = [&] {
    for (int j = 0; j < n; ++j) {
      float sum = 0;
      for (int k = 0; k < n; ++k) sum += c[j * n + k];
      for (int k = 0; k < n; ++k) c[j * n + k] /= sum + s.eps;
    }
  };
  const auto cols = [&] {
    for (int k = 0; k < n; ++k) {
      float sum = 0;
      for (int j = 0; j < n; ++j) sum += c[j * n + k];
      for (int j = 0; j < n; ++j) c[j * n + k] /= sum + s.eps;
    }
  };
  for (int j = 0; j < n; ++j) {
    float* row = c + j * n;
    float top = row[0];
    for (int k = 1; k < n; ++k) top = std::max(top, row[k]);
    float sum = 0;
    for (int k = 0; k < n; ++k) sum += row[k] = std::exp(row[k] - top);
    for (int k = 0; k < n; ++k) row[k] = row[k] / sum + s.eps;
  }
  cols();
  for (int i = 1; i < s.sinkhorn_iters; ++i) rows(), cols();
}

}  // namespace

HcWeights hc_pre(const HcShape& s, const HcMixer& m, const float* streams, float* out) {
  const int n = s.hc;
  const std::vector<float> mix = mixes(s, m, streams, (2 + n) * n);
  std::vector<float> pre(n);
  HcWeights w{std::vector<float>(n), std::vector<float>(n * n)};
  for (int j = 0; j < n; ++j) {
    pre[j] = sigmoid(mix[j] * m.scale[0] + m.base[j]) + s.eps;
    w.post[j] = 2.0f * sigmoid(mix[n + j] * m.scale[1] + m.base[n + j]);
  }
  for (int i = 0; i < n * n; ++i) w.comb[i] = mix[2 * n + i] * m.scale[2] + m.base[2 * n + i];
  sinkhorn(s, w.comb.data());
  collapse(s, pre, streams, out);
  return w;
}

void hc_post(const HcShape& s, const HcWeights& w, const float* x, float* streams) {
  const int n = s.hc;
  std::vector<float> old(streams, streams + n * s.dim);
  for (int k = 0; k < n; ++k)
    for (int64_t i = 0; i < s.dim; ++i) {
      float acc = w.post[k] * x[i];
      for (int j = 0; j < n; ++j) acc += w.comb[j * n + k] * old[j * s.dim + i];
      streams[k * s.dim + i] = acc;
    }
}

void hc_head(const HcShape& s, const HcMixer& m, const float* streams, float* out) {
  const std::vector<float> mix = mixes(s, m, streams, s.hc);
  std::vector<float> pre(s.hc);
  for (int j = 0; j < s.hc; ++j) pre[j] = sigmoid(mix[j] * m.scale[0] + m.base[j]) + s.eps;
  collapse(s, pre, streams, out);
}

}  // namespace inferd::engine::dsv4
