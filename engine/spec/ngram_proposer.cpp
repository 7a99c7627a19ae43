#include "engine/spec/ngram_proposer.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace inferd::engine {

NgramProposer::NgramProposer(NgramOptions opts) : opts_(opts) {
  if (opts_.num_speculative_tokens < 1)
    throw std::invalid_argument("num_speculative_tokens must be at least 1, got " +
                                std::to_string(opts_.num_speculative_tokens));
  if (opts_.prompt_lookup_min < 1)
    throw std::invalid_argument("prompt_lookup_min must be at least 1, got " + std::to_string(opts_.prompt_lookup_min));
  if (opts_.prompt_lookup_max < opts_.prompt_lookup_min)
    throw std::invalid_argument("prompt_lookup_max (" + std::to_string(opts_.prompt_lookup_max) +
                                ") must be at least prompt_lookup_min (" + std::to_string(opts_.prompt_lookup_min) + ")");
}

std::vector<int32_t> NgramProposer::lookup(std::span<const int32_t> tokens, int k) const {
  k = std::min(k, opts_.num_speculative_tokens);
  const auto len = static_cast<ptrdiff_t>(tokens.size());
  if (k <= 0) return {};
  // Longer matches first: they predict better.
  for (ptrdiff_t n = std::min<ptrdiff_t>(opts_.prompt_lookup_max, len - 1); n >= opts_.prompt_lookup_min; --n) {
    const auto tail = tokens.subspan(static_cast<size_t>(len - n));
    // The most recent occurrence that ends before the tail does, so at least one token follows it.
    for (ptrdiff_t i = len - n - 1; i >= 0; --i) {
      if (!std::equal(tail.begin(), tail.end(), tokens.begin() + i)) continue;
      const ptrdiff_t from = i + n, to = std::min(len, from + k);
      return {tokens.begin() + from, tokens.begin() + to};
    }
  }
  return {};
}

void NgramProposer::propose(std::span<const DraftRequest> reqs, std::vector<std::vector<int32_t>>& drafts) {
  drafts.resize(reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) drafts[i] = lookup(reqs[i].tokens, reqs[i].max_drafts);
}

}  // namespace inferd::engine
