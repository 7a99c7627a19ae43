// Speculative decoding's proposer: guesses the tokens a sequence will generate
// next (drafts), which the engine then verifies in one forward pass of the
// target model (engine/engine.cpp). A guess costs a position in the step; a
// wrong one costs nothing else, since verification keeps only what the target
// itself would have produced.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "engine/shape_space.hpp"
#include "engine/spec/draft_pace.hpp"

namespace inferd::engine {

// One decoding sequence asking for drafts.
struct DraftRequest {
  uint64_t seq = 0;
  std::span<const int32_t> tokens;  // prompt, then what was generated
  int max_drafts = 0;               // the most tokens the step has room for
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  // drafts[i] receives at most reqs[i].max_drafts tokens for reqs[i]; any
  // number from none is a valid answer, per sequence.
  virtual void propose(std::span<const DraftRequest> reqs, std::vector<std::vector<int32_t>>& drafts) = 0;
  // A proposer that keeps state per sequence lets it go: the sequence ended.
  virtual void release(uint64_t seq) { (void)seq; }
  // Lets every sequence's state go (the engine was reset).
  virtual void clear() {}
  // The shape keys its own kernels can reach under the target's axes (a
  // proposer that runs a model or a head), and a run that touches every one:
  // the warm-up's coverage gate counts them, and runs warm() before its phases.
  virtual std::vector<kernels::ShapeKey> reachable_shape_keys(const ShapeAxes& target) const {
    (void)target;
    return {};
  }
  virtual void warm(const ShapeAxes& target) { (void)target; }
  // A draft's cost as a share of a plain decode step (DraftPace): the verify
  // step's per-draft cost, plus what drafting itself costs where it runs
  // between the steps (a head; a draft model's forwards are seen as steps).
  virtual double draft_cost() const { return DraftPace::kDraftCost; }
  // A proposer that drafts from the target's hidden state (a draft head)
  // hears, after each step, every sampled sequence's feature at its last fed
  // position (Model::forward's features), which produced its newest token;
  // the sequence then holds n_tokens tokens, that one the last.
  virtual bool reads_features() const { return false; }
  virtual void observe(uint64_t seq, size_t n_tokens, std::span<const float> feature) {
    (void)seq;
    (void)n_tokens;
    (void)feature;
  }
};

}  // namespace inferd::engine
