// Token sampling: penalties, greedy or temperature sampling with top-k, top-p and
// min-p truncation, a per-sequence seeded RNG, and logprobs.
#pragma once
#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kernels/backend.hpp"

namespace inferd::engine {

constexpr int kMaxLogprobs = 20;
// As in vLLM, temperatures below this are greedy: dividing by them would overflow.
constexpr float kGreedyTemperature = 1e-5f;

// Meanings and valid ranges follow vLLM's SamplingParams.
struct SamplingParams {
  float temperature = 1.0f;         // 0 (below kGreedyTemperature) = greedy
  int top_k = 0;                    // 0 or -1 = off
  float top_p = 1.0f;               // (0, 1]
  float min_p = 0.0f;               // [0, 1]
  float repetition_penalty = 1.0f;  // > 0; over prompt and output tokens
  float presence_penalty = 0.0f;    // [-2, 2]; over output tokens
  float frequency_penalty = 0.0f;   // [-2, 2]; over output tokens
  std::optional<uint64_t> seed;     // unset = seeded from the random device
  int logprobs = -1;                // -1 = none; 0..kMaxLogprobs = that many top alternatives

  bool greedy() const { return temperature < kGreedyTemperature; }
  bool penalized() const {
    return repetition_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f;
  }
  // Why these parameters are unusable, or nullopt if they are fine.
  std::optional<std::string> invalid_reason() const;
};

struct SampleResult {
  int32_t token = 0;
  // Logprobs are "raw", as vLLM's default: the log-softmax of the model's logits
  // before penalties, temperature and truncation, so they describe the model and
  // not the sampling settings. Set only when params.logprobs >= 0 (else 0 / empty).
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // params.logprobs best (token, logprob), best first
};

// A token and a score: its logit, or its unnormalized probability once the
// truncation filters have run.
struct TokenScore {
  int32_t token;
  float score;
};

// One sequence's sampler: owns its RNG, so a given seed reproduces the same tokens.
class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);  // throws std::invalid_argument

  // `logits` has one entry per vocabulary token and is modified in place: it
  // holds the penalized logits afterwards. `context` is prompt + generated
  // tokens (for the repetition penalty), `generated` the output tokens so far
  // (presence and frequency penalties). Order: penalties -> greedy argmax, or
  // temperature -> top-k -> top-p -> min-p -> draw. Throws std::out_of_range for
  // a token id outside the vocabulary.
  SampleResult sample(std::span<float> logits, std::span<const int32_t> context,
                      std::span<const int32_t> generated);

  // Verifies a draft token proposed with certainty (a prompt-lookup draft: the
  // proposal is a point mass), as speculative sampling does (Leviathan et al.):
  // with p the distribution sample() draws from, the draft is accepted with
  // probability p(draft); otherwise a token is drawn from p without the draft,
  // renormalized (max(0, p - q), normalized). The result is the draft exactly
  // when it was accepted, and is distributed as p either way. Greedy: the argmax.
  SampleResult verify(std::span<float> logits, std::span<const int32_t> context, std::span<const int32_t> generated,
                      int32_t draft);

  // This draw's parameters for sampling where the logits are (Backend::sample),
  // its randomness taken from this sampler's generator, so a seed still gives
  // the same tokens on the same device; nullopt where the device cannot draw as
  // sample() does: penalties and logprobs need the logits here.
  std::optional<kernels::RowSampling> device_params();

  const SamplingParams& params() const { return params_; }

 private:
  void apply_penalties(std::span<float> logits, std::span<const int32_t> context,
                       std::span<const int32_t> generated);
  float raw_logit(int32_t token, std::span<const float> logits) const;
  int32_t draw(std::span<const float> logits);
  int32_t draw_against(std::span<const float> logits, int32_t draft);
  double uniform();  // [0, 1)

  SamplingParams params_;
  std::mt19937_64 rng_;
  // Scratch reused across steps (sized to the vocabulary on first use).
  std::vector<TokenScore> candidates_;
  std::vector<uint8_t> penalized_;                      // token was changed by a penalty this step
  std::vector<int32_t> counts_;                         // occurrences in `generated`
  std::vector<std::pair<int32_t, float>> raw_logits_;   // logits before penalties, of changed tokens
};

// The distribution temperature sampling draws from for `logits` (penalties not
// applied): surviving tokens with their probabilities, ordered by token id.
// Greedy parameters give the argmax with probability 1.
std::vector<std::pair<int32_t, float>> sampling_distribution(std::span<const float> logits,
                                                             const SamplingParams& params);

}  // namespace inferd::engine
