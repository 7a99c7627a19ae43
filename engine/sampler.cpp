#include "engine/sampler.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace inferd::engine {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Higher score first; ties by token id so every platform picks the same order.
bool higher(const TokenScore& a, const TokenScore& b) {
  return a.score > b.score || (a.score == b.score && a.token < b.token);
}

double sum_of(std::span<const TokenScore> c) {
  double total = 0;
  for (const auto& x : c) total += x.score;
  return total;
}

// Coarse classes of a weight in [0, 1]: the float's bits order like its value, so
// dropping the low mantissa bits gives classes that are monotone in the weight,
// 8 per power of two (each spans a factor of about 1.09).
constexpr uint32_t kOne = 0x3F800000;  // bits of 1.0f
constexpr size_t kWeightClasses = (kOne >> 20) + 1;
size_t weight_class(float w) { return (kOne - std::bit_cast<uint32_t>(w)) >> 20; }  // 0 = heaviest

// Keeps the smallest set of most likely tokens whose weight reaches `target`;
// returns the kept weight. No sort of the vocabulary: one pass sums the weight of
// each class to find the class the boundary falls in; heavier classes are kept
// whole, lighter ones dropped, and only the boundary class is resolved exactly,
// by a quickselect that keeps or drops half of the undecided range per round.
double keep_top_p(std::vector<TokenScore>& c, double target) {
  std::array<double, kWeightClasses> mass{};
  for (const auto& x : c) mass[weight_class(x.score)] += x.score;
  size_t edge = 0;
  double kept = 0;
  while (edge + 1 < kWeightClasses && kept + mass[edge] < target) kept += mass[edge++];

  auto classes_up_to = [](size_t cls) { return [cls](const TokenScore& x) { return weight_class(x.score) <= cls; }; };
  const auto sure_end = edge == 0 ? c.begin() : std::partition(c.begin(), c.end(), classes_up_to(edge - 1));
  const auto edge_end = std::partition(sure_end, c.end(), classes_up_to(edge));
  size_t lo = static_cast<size_t>(sure_end - c.begin());  // c[0, lo) is kept
  size_t hi = static_cast<size_t>(edge_end - c.begin());  // the boundary lies in (lo, hi]
  while (hi - lo > 1) {
    const size_t mid = lo + (hi - lo) / 2;
    std::nth_element(c.begin() + static_cast<long>(lo), c.begin() + static_cast<long>(mid),
                     c.begin() + static_cast<long>(hi), higher);
    const double upper = sum_of(std::span(c).subspan(lo, mid - lo));
    if (kept + upper >= target) {
      hi = mid;
    } else {
      kept += upper;
      lo = mid;
    }
  }
  c.resize(hi);
  return kept + c[lo].score;
}

// Keeps tokens whose probability is at least min_p times the most likely one's.
double keep_min_p(std::vector<TokenScore>& c, float min_p) {
  float max = 0;
  for (const auto& x : c) max = std::max(max, x.score);
  std::erase_if(c, [&](const TokenScore& x) { return x.score < min_p * max; });
  return sum_of(c);
}

// Fills `c` with the tokens temperature sampling may draw, each scored with its
// unnormalized probability, and returns the scores' sum. Order of the filters:
// top-k (on logits), then top-p and min-p (on probabilities).
double truncated_weights(std::span<const float> logits, const SamplingParams& p, std::vector<TokenScore>& c) {
  const float inv_t = 1.0f / p.temperature;
  c.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i)  // NaN becomes -inf so `higher` stays a strict weak order
    c[i] = {static_cast<int32_t>(i), std::isnan(logits[i]) ? kNegInf : logits[i] * inv_t};

  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < c.size()) {
    std::nth_element(c.begin(), c.begin() + p.top_k, c.end(), higher);
    c.resize(static_cast<size_t>(p.top_k));
  }
  const TokenScore best = *std::min_element(c.begin(), c.end(), higher);
  if (!std::isfinite(best.score)) {  // all -inf, or some +inf: the best is certain
    c = {{best.token, 1.0f}};
    return 1.0;
  }
  double total = 0;
  for (auto& x : c) total += (x.score = std::exp(x.score - best.score));
  if (p.top_p < 1.0f) total = keep_top_p(c, p.top_p * total);
  if (p.min_p > 0.0f) total = keep_min_p(c, p.min_p);
  return total;
}

int32_t argmax(std::span<const float> logits) {
  int32_t best = 0;
  float best_logit = kNegInf;
  for (size_t i = 0; i < logits.size(); ++i)
    if (logits[i] > best_logit) {
      best_logit = logits[i];
      best = static_cast<int32_t>(i);
    }
  return best;
}

// The n highest logits, best first, in one pass (n is small).
std::vector<TokenScore> top_n(std::span<const float> logits, size_t n) {
  std::vector<TokenScore> best;
  if (n == 0) return best;
  best.reserve(n + 1);
  for (size_t i = 0; i < logits.size(); ++i) {
    const float x = logits[i];
    if (std::isnan(x) || (best.size() == n && !(x > best.back().score))) continue;
    const TokenScore t{static_cast<int32_t>(i), x};
    best.insert(std::upper_bound(best.begin(), best.end(), t, higher), t);
    if (best.size() > n) best.pop_back();
  }
  return best;
}

double log_sum_exp(std::span<const float> logits) {
  float max = kNegInf;
  for (float x : logits) max = std::max(max, x);
  if (!std::isfinite(max)) return max;
  double sum = 0;
  for (float x : logits) sum += std::exp(x - max);
  return max + std::log(sum);
}

std::string num(float v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

}  // namespace

std::optional<std::string> SamplingParams::invalid_reason() const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature))
    return "temperature must be a non-negative number, got " + num(temperature);
  if (top_k < -1) return "top_k must be -1 or 0 (off) or positive, got " + std::to_string(top_k);
  if (!(top_p > 0.0f && top_p <= 1.0f)) return "top_p must be in (0, 1], got " + num(top_p);
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return "min_p must be in [0, 1], got " + num(min_p);
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty))
    return "repetition_penalty must be greater than 0, got " + num(repetition_penalty);
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f))
    return "presence_penalty must be in [-2, 2], got " + num(presence_penalty);
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f))
    return "frequency_penalty must be in [-2, 2], got " + num(frequency_penalty);
  if (logprobs < -1 || logprobs > kMaxLogprobs)
    return "logprobs must be between 0 and " + std::to_string(kMaxLogprobs) + ", got " + std::to_string(logprobs);
  return std::nullopt;
}

Sampler::Sampler(const SamplingParams& params) : params_(params) {
  if (auto why = params.invalid_reason()) throw std::invalid_argument(*why);
  if (params.seed) {
    rng_.seed(*params.seed);
  } else {
    std::random_device rd;
    rng_.seed((uint64_t{rd()} << 32) | rd());
  }
}

double Sampler::uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

std::optional<kernels::RowSampling> Sampler::device_params() {
  const SamplingParams& p = params_;
  if (p.logprobs >= 0 || p.penalized()) return std::nullopt;
  kernels::RowSampling r;
  r.greedy = p.greedy();
  r.temperature = p.temperature;
  r.top_k = p.top_k;
  r.top_p = p.top_p;
  r.min_p = p.min_p;
  if (!r.greedy) r.random = rng_();
  return r;
}

SampleResult Sampler::sample(std::span<float> logits, std::span<const int32_t> context,
                             std::span<const int32_t> generated) {
  return verify(logits, context, generated, -1);
}

SampleResult Sampler::verify(std::span<float> logits, std::span<const int32_t> context,
                             std::span<const int32_t> generated, int32_t draft) {
  if (logits.empty()) throw std::invalid_argument("sampling needs at least one logit");
  SampleResult r;
  // Raw logprobs come from the logits as the model produced them, so they are
  // taken before the penalties change `logits`.
  double lse = 0;
  if (params_.logprobs >= 0) {
    lse = log_sum_exp(logits);
    for (const auto& [token, logit] : top_n(logits, static_cast<size_t>(params_.logprobs)))
      r.top.emplace_back(token, static_cast<float>(logit - lse));
  }
  apply_penalties(logits, context, generated);
  r.token = params_.greedy() ? argmax(logits) : draft < 0 ? draw(logits) : draw_against(logits, draft);
  if (params_.logprobs >= 0) r.logprob = static_cast<float>(raw_logit(r.token, logits) - lse);
  return r;
}

// vLLM's semantics: the repetition penalty divides positive and multiplies
// negative logits of every token seen in prompt or output; frequency and
// presence penalties subtract count * frequency + presence for output tokens.
void Sampler::apply_penalties(std::span<float> logits, std::span<const int32_t> context,
                              std::span<const int32_t> generated) {
  raw_logits_.clear();
  if (!params_.penalized()) return;
  const bool repetition = params_.repetition_penalty != 1.0f;
  const bool additive = params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f;

  const size_t vocab = logits.size();
  // Check every id first, so a bad one leaves no half-done work behind.
  for (auto tokens : {context, generated})
    for (int32_t t : tokens)
      if (t < 0 || static_cast<size_t>(t) >= vocab)
        throw std::out_of_range("token id " + std::to_string(t) + " is outside the vocabulary of " +
                                std::to_string(vocab));
  if (penalized_.size() != vocab) {
    penalized_.assign(vocab, 0);
    counts_.assign(vocab, 0);
  }
  auto remember_raw = [&](int32_t t) {
    if (!penalized_[t]) {
      penalized_[t] = 1;
      raw_logits_.emplace_back(t, logits[t]);
    }
  };

  if (repetition) {
    const float r = params_.repetition_penalty;
    for (int32_t t : context) {
      if (penalized_[t]) continue;  // once per distinct token
      remember_raw(t);
      logits[t] = logits[t] > 0 ? logits[t] / r : logits[t] * r;
    }
  }
  if (additive) {
    for (int32_t t : generated) ++counts_[t];
    for (int32_t t : generated) {
      if (counts_[t] == 0) continue;  // already applied
      remember_raw(t);
      logits[t] -= params_.frequency_penalty * static_cast<float>(counts_[t]) + params_.presence_penalty;
      counts_[t] = 0;
    }
  }
  for (const auto& [t, raw] : raw_logits_) penalized_[t] = 0;
}

float Sampler::raw_logit(int32_t token, std::span<const float> logits) const {
  for (const auto& [t, raw] : raw_logits_)
    if (t == token) return raw;
  return logits[token];
}

int32_t Sampler::draw(std::span<const float> logits) {
  const double total = truncated_weights(logits, params_, candidates_);
  double u = uniform() * total;
  for (const auto& c : candidates_) {
    u -= c.score;
    if (u < 0) return c.token;
  }
  // Rounding left u just above zero: the last candidate with any weight.
  for (auto it = candidates_.rbegin(); it != candidates_.rend(); ++it)
    if (it->score > 0) return it->token;
  return candidates_.front().token;
}

int32_t Sampler::draw_against(std::span<const float> logits, int32_t draft) {
  const double total = truncated_weights(logits, params_, candidates_);
  double w = 0;  // the draft's weight: 0 when truncation dropped it
  for (const auto& c : candidates_)
    if (c.token == draft) w = c.score;
  if (uniform() * total < w) return draft;
  // Rejected: the residual, p without the draft.
  double u = uniform() * (total - w);
  for (const auto& c : candidates_) {
    if (c.token == draft) continue;
    u -= c.score;
    if (u < 0) return c.token;
  }
  for (auto it = candidates_.rbegin(); it != candidates_.rend(); ++it)
    if (it->token != draft && it->score > 0) return it->token;
  return draft;  // the draft held every bit of weight: it was certain
}

std::vector<std::pair<int32_t, float>> sampling_distribution(std::span<const float> logits,
                                                             const SamplingParams& params) {
  if (logits.empty()) return {};
  if (params.greedy()) return {{argmax(logits), 1.0f}};
  std::vector<TokenScore> c;
  const double total = truncated_weights(logits, params, c);
  std::sort(c.begin(), c.end(), [](const TokenScore& a, const TokenScore& b) { return a.token < b.token; });
  std::vector<std::pair<int32_t, float>> out;
  out.reserve(c.size());
  for (const auto& x : c) out.emplace_back(x.token, static_cast<float>(x.score / total));
  return out;
}

}  // namespace inferd::engine
