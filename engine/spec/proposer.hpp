// Speculative decoding's proposer: guesses the tokens a sequence will generate
// next (drafts), which the engine then verifies in one forward pass of the
// target model (engine/engine.cpp). A guess costs a position in the step; a
// wrong one costs nothing else, since verification keeps only what the target
// itself would have produced.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

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
};

}  // namespace inferd::engine
