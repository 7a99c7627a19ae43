#include "engine/spec/ngram_proposer.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <unordered_map>

namespace inferd::engine {
namespace {

// The earlier occurrences a proposal weighs, the most recent first: enough
// for the text to vote, bounded so a long sequence costs no more.
constexpr size_t kMostOccurrences = 64;
// Drafts stop where fewer than this share of the occurrences agreed with
// every draft so far: past it the text itself is undecided.
constexpr double kLeastAgreement = 0.3;

// The drafts that follow the occurrences whose continuations start at `from`
// (most recent first): at each position the token most of them continue with,
// ties to the most recent, after which only those that agree go on. A
// continuation that reaches the end of the sequence goes on into the drafts
// themselves (a period of the text repeated).
std::vector<int32_t> follow(std::span<const int32_t> tokens, std::vector<ptrdiff_t> from, int k) {
  const auto len = static_cast<ptrdiff_t>(tokens.size());
  std::vector<int32_t> drafts;
  auto at = [&](ptrdiff_t pos) { return pos < len ? tokens[pos] : drafts[pos - len]; };
  std::unordered_map<int32_t, size_t> votes;
  double agreed = 1.0;
  for (ptrdiff_t j = 0; j < k; ++j) {
    votes.clear();
    for (ptrdiff_t f : from) ++votes[at(f + j)];
    int32_t best = at(from[0] + j);
    for (ptrdiff_t f : from)
      if (votes[at(f + j)] > votes[best]) best = at(f + j);
    agreed *= static_cast<double>(votes[best]) / static_cast<double>(from.size());
    if (agreed < kLeastAgreement) break;
    std::erase_if(from, [&](ptrdiff_t f) { return at(f + j) != best; });
    drafts.push_back(best);
  }
  return drafts;
}

}  // namespace

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
    // The occurrences that end before the tail does, so at least one token follows each.
    std::vector<ptrdiff_t> from;
    for (ptrdiff_t i = len - n - 1; i >= 0 && from.size() < kMostOccurrences; --i)
      if (std::equal(tail.begin(), tail.end(), tokens.begin() + i)) from.push_back(i + n);
    if (!from.empty()) return follow(tokens, std::move(from), k);
  }
  return {};
}

void NgramProposer::propose(std::span<const DraftRequest> reqs, std::vector<std::vector<int32_t>>& drafts) {
  drafts.resize(reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) drafts[i] = lookup(reqs[i].tokens, reqs[i].max_drafts);
}

}  // namespace inferd::engine
