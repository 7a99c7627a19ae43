// Prompt lookup (n-gram) proposer, after vLLM's "ngram" method: the drafts
// are the tokens that followed earlier occurrences of the sequence's last n
// tokens in its own prompt and output, n from prompt_lookup_max down to
// prompt_lookup_min (the longest that occurs). Where the text occurred more
// than once, the occurrences vote: each draft is the token most of them
// continue with (ties to the most recent, so a single occurrence is copied as
// it is), and the drafts stop where the occurrences disagree too much to
// predict. Where a continuation reaches the end of the sequence it goes on into
// the drafts themselves (a repeating period). No model: it pays off on output
// that repeats its context (code edits, quoting, structured data).
#pragma once
#include "engine/spec/proposer.hpp"

namespace inferd::engine {

struct NgramOptions {
  int num_speculative_tokens = 5;  // drafts per sequence at most
  int prompt_lookup_min = 1;
  int prompt_lookup_max = 4;
};

class NgramProposer final : public Proposer {
 public:
  explicit NgramProposer(NgramOptions opts);  // throws std::invalid_argument on bad options
  void propose(std::span<const DraftRequest> reqs, std::vector<std::vector<int32_t>>& drafts) override;

  // The drafts for one sequence's tokens: at most `k` (and at most
  // num_speculative_tokens), none without a match.
  std::vector<int32_t> lookup(std::span<const int32_t> tokens, int k) const;

 private:
  NgramOptions opts_;
};

}  // namespace inferd::engine
