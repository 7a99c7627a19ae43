// From a Matcher's state to the tokens a request may sample next. A token is
// allowed when the matcher accepts all of its bytes; the stop tokens, when the
// JSON so far is whole. Trial runs are cheap (matcher.hpp) and most are skipped:
// tokens are grouped by their first two bytes, so only groups whose first bytes
// are accepted are tried; inside a string, tokens of plain content bytes only
// are allowed wholesale without a trial, and in free text (tool calls under
// tool_choice auto) every token without the first byte of the tag that ends it.
#pragma once
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/grammar/matcher.hpp"

namespace inferd::engine::grammar {

// One bit per token id.
using TokenSet = std::vector<uint64_t>;

inline bool contains(const TokenSet& set, int32_t id) {
  return (set[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1;
}

// The vocabulary as the grammar sees it; built once per model.
class TokenIndex {
 public:
  // bytes[id]: the text token id appends; empty for tokens that are never text
  // (control tokens), which no grammar allows.
  explicit TokenIndex(std::vector<std::string> bytes);

  size_t size() const { return bytes_.size(); }
  const std::string& bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }

  // Sets `out` to the tokens `m` accepts next, plus `stop_ids` when m.can_end().
  // Returns how many there are.
  size_t allowed(const Matcher& m, std::span<const int32_t> stop_ids, TokenSet& out) const;

 private:
  std::vector<std::string> bytes_;
  // Text tokens by first byte, each group ordered by second byte (one-byte
  // tokens first); second_[b][0] is where group b's one-byte tokens start,
  // second_[b][c + 1] where those with second byte c do, second_[b][257] the end.
  std::vector<int32_t> by_first_[256];
  std::vector<std::array<uint32_t, 258>> second_;
  TokenSet plain_;                        // every byte is plain string content
  std::vector<int32_t> plain_by_length_;  // the same tokens, fewest characters first
  size_t longest_plain_ = 0;              // in characters
  std::vector<int32_t> not_plain_;  // text tokens with a byte that is not plain content
  TokenSet text_;                         // every token with text
  std::vector<int32_t> with_byte_[256];   // text tokens in which the byte occurs
};

// Sets the logits of tokens outside `allowed` to -inf (ids past the set too).
void mask_logits(const TokenSet& allowed, std::span<float> logits);

}  // namespace inferd::engine::grammar
