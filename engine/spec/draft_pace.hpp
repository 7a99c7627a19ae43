// How many drafts a sequence carries next, from how its drafts have fared.
// A verify step costs more than a plain decode step for each draft it carries,
// and a rejected draft buys nothing, so drafts pay only where they are
// accepted. The pace estimates the sequence's acceptance rate p (the chance a
// draft is kept when every draft before it was: a running average over its
// recent verify steps) and carries the k drafts that give the most tokens per
// unit of step time, as in Leviathan et al. (2023, "Fast Inference from
// Transformers via Speculative Decoding", section 3.5): a step of k drafts
// yields (1 - p^(k+1)) / (1 - p) tokens on average and costs 1 + draft_cost * k
// plain steps. Where not even one draft pays (p below draft_cost), it drafts
// nothing for a pause, then probes with one; the pause doubles each time a
// probe leaves it there, and a kept draft brings it back to one step.
#pragma once

namespace inferd::engine {

// A running acceptance rate: the chance a draft is kept when every draft
// before it was. Each verify step's drafts up to the first rejected one are
// trials; older steps fade by `fade` each step. It starts as one kept trial.
class AcceptanceRate {
 public:
  void record(int drafted, int accepted, double fade) {
    const int trials = accepted < drafted ? accepted + 1 : drafted;
    kept_ = fade * kept_ + accepted;
    tried_ = fade * tried_ + trials;
  }
  double value() const { return tried_ > 0 ? kept_ / tried_ : 0.0; }

 private:
  double kept_ = 1.0, tried_ = 1.0;  // faded counts of kept and tried drafts
};

class DraftPace {
 public:
  // A draft's share of a plain decode step's time: on a 2-core CPU
  // (SmolLM2-135M Q4_1, 2 threads, `inferctl bench engine --drafts`) a verify
  // step of k drafts costs about 1 + 0.16 k plain steps.
  static constexpr double kDraftCost = 0.16;
  // How much each verify step's outcome weighs in the running average: the
  // older ones fade by this factor each step, so a change of text (novel to
  // repetitive) shows within a few steps.
  static constexpr double kFade = 0.75;
  // The longest pause (steps).
  static constexpr int kLongestPause = 64;

  // `most` drafts at most; a fresh sequence assumes its drafts are kept (one
  // step's worth of evidence), so its first verify step carries `most`.
  explicit DraftPace(int most, double draft_cost = kDraftCost) : most_(most), cost_(draft_cost) {}

  // The most drafts to ask for this decode step: 0 while paused (each call is
  // one step of the pause), at least 1 otherwise (a probe, after a pause).
  int next() {
    if (most_ <= 0) return 0;
    if (pause_ > 0) {
      --pause_;
      return 0;
    }
    const int k = best_k();
    return k > 0 ? k : 1;
  }

  // A verify step's outcome: `drafted` drafts fed, the first `accepted` kept.
  // The drafts up to the first rejected one were each a trial of p.
  void record(int drafted, int accepted) {
    if (drafted <= 0) return;
    rate_.record(drafted, accepted, kFade);
    if (accepted > 0) backoff_ = 1;
    if (best_k() > 0) return;
    pause_ = backoff_;
    backoff_ = backoff_ * 2 < kLongestPause ? backoff_ * 2 : kLongestPause;
  }

  // The estimated acceptance rate.
  double acceptance() const { return rate_.value(); }

 private:
  // argmax over k of tokens per step time; 0 where no draft pays.
  int best_k() const {
    const double p = acceptance();
    int best = 0;
    double best_rate = 1.0, tokens = 1.0, p_k = 1.0;  // k = 0: one token per plain step
    for (int k = 1; k <= most_; ++k) {
      p_k *= p;
      tokens += p_k;  // 1 + p + ... + p^k
      const double rate = tokens / (1.0 + cost_ * k);
      if (rate > best_rate) best = k, best_rate = rate;
    }
    return best;
  }

  int most_;
  double cost_;
  AcceptanceRate rate_;
  int pause_ = 0;                    // steps left without drafts
  int backoff_ = 1;                  // the next pause's length
};

}  // namespace inferd::engine
