#include "engine/models/deepseek_v4_attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <numeric>

namespace inferd::engine::dsv4 {

TailRope TailRope::make(int head_dim, int rot, double theta, const Yarn& yarn) {
  TailRope r{head_dim, rot, std::vector<float>(rot / 2)};
  // The dim whose wavelength makes `turns` turns over the original context.
  const auto correction_dim = [&](double turns) {
    return rot * std::log(yarn.original_context / (turns * 2 * std::numbers::pi)) / (2 * std::log(theta));
  };
  double low = 0, high = 0;
  if (yarn.factor > 0) {
    low = std::max(0.0, std::floor(correction_dim(yarn.beta_fast)));
    high = std::min(double(rot - 1), std::ceil(correction_dim(yarn.beta_slow)));
    if (high == low) high += 0.001;  // as transformers: no division by zero
  }
  for (int i = 0; i < rot / 2; ++i) {
    const double f = std::pow(theta, -2.0 * i / rot);
    if (yarn.factor <= 0) {
      r.freq[i] = float(f);
      continue;
    }
    const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
    r.freq[i] = float(f * (1 - ramp) + f / yarn.factor * ramp);
  }
  return r;
}

void TailRope::apply(float* x, int n_heads, int64_t pos, bool inverse) const {
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + int64_t(h) * head_dim + (head_dim - rot);
    for (int i = 0; i < rot / 2; ++i) {
      const float angle = float(pos) * freq[i];
      const float c = std::cos(angle), s = inverse ? -std::sin(angle) : std::sin(angle);
      const float a = v[2 * i], b = v[2 * i + 1];
      v[2 * i] = a * c - b * s;
      v[2 * i + 1] = a * s + b * c;
    }
  }
}

std::vector<float> pool_windows(const CompressorInput& in) {
  const int r = in.ratio, d = in.dim;
  const bool overlap = in.overlap();
  const int width = overlap ? 2 * d : d;
  const int64_t start = in.window_start(in.first_window);
  const int64_t n = std::max<int64_t>(0, (start + in.n_tokens) / r - in.first_window);
  std::vector<float> out(n * d);
  std::vector<float> score, kv;
  // Row of position t, channel ch.
  const auto at = [&](const float* rows, int64_t t, int ch) { return rows[(t - start) * width + ch]; };
  for (int64_t i = 0; i < n; ++i) {
    const int64_t w = in.first_window + i;
    for (int c = 0; c < d; ++c) {
      // The slots: window w's tokens (second half of the channels with overlap),
      // then with overlap window w - 1's on the first half.
      score.clear(), kv.clear();
      for (int64_t t = w * r; t < (w + 1) * r; ++t) {
        const int ch = overlap ? d + c : c;
        score.push_back(at(in.score, t, ch));
        kv.push_back(at(in.kv, t, ch));
      }
      if (overlap && w > 0)
        for (int64_t t = (w - 1) * r; t < w * r; ++t) {
          score.push_back(at(in.score, t, c));
          kv.push_back(at(in.kv, t, c));
        }
      const float top = *std::max_element(score.begin(), score.end());
      float sum = 0, acc = 0;
      for (size_t j = 0; j < score.size(); ++j) {
        const float e = std::exp(score[j] - top);
        sum += e;
        acc += e * kv[j];
      }
      out[i * d + c] = acc / sum;
    }
  }
  return out;
}

void index_topk(const IndexerQuery& q, std::span<const float* const> keys, int64_t pos, int ratio, int k,
                int32_t* out) {
  const int64_t visible = std::min<int64_t>(int64_t(keys.size()), (pos + 1) / ratio);
  const float scale = 1.0f / std::sqrt(float(q.head_dim));
  std::vector<float> score(visible);
  for (int64_t j = 0; j < visible; ++j) {
    float total = 0;
    for (int h = 0; h < q.n_heads; ++h) {
      const float* qh = q.q + int64_t(h) * q.head_dim;
      float dot = 0;
      for (int i = 0; i < q.head_dim; ++i) dot += qh[i] * keys[j][i];
      total += q.weights[h] * std::max(dot, 0.0f) * scale;
    }
    score[j] = total;
  }
  std::vector<int32_t> order(visible);
  std::iota(order.begin(), order.end(), 0);
  const int64_t kept = std::min<int64_t>(k, visible);
  std::partial_sort(order.begin(), order.begin() + kept, order.end(),
                    [&](int32_t a, int32_t b) { return score[a] > score[b] || (score[a] == score[b] && a < b); });
  for (int i = 0; i < k; ++i) out[i] = i < kept ? order[i] : -1;
}

void sink_attention(const float* q, int n_heads, int dim, std::span<const float* const> keys, const float* sinks,
                    float scale, float* out) {
  std::vector<float> p(keys.size());
  for (int h = 0; h < n_heads; ++h) {
    const float* qh = q + int64_t(h) * dim;
    float top = sinks[h];
    for (size_t j = 0; j < keys.size(); ++j) {
      float dot = 0;
      for (int i = 0; i < dim; ++i) dot += qh[i] * keys[j][i];
      p[j] = dot * scale;
      top = std::max(top, p[j]);
    }
    float sum = std::exp(sinks[h] - top);  // the sink takes probability but has no value
    for (float& v : p) sum += v = std::exp(v - top);
    float* o = out + int64_t(h) * dim;
    std::fill(o, o + dim, 0.0f);
    for (size_t j = 0; j < keys.size(); ++j) {
      const float w = p[j] / sum;
      for (int i = 0; i < dim; ++i) o[i] += w * keys[j][i];
    }
  }
}

}  // namespace inferd::engine::dsv4
