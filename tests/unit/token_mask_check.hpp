// The token mask against the brute-force answer: after `prefix`, the mask holds
// exactly the tokens the matcher accepts (the stop token `eos` where it may end),
// and allowed() counts them. Returns the mask, for the caller's own checks.
#pragma once
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/grammar/matcher.hpp"
#include "engine/grammar/token_mask.hpp"

namespace test_mask {

namespace g = inferd::engine::grammar;

inline const g::TokenSet& check_against_brute_force(const g::TokenIndex& index, const g::Matcher& m,
                                                    const std::vector<std::string>& vocab, int32_t eos,
                                                    std::string_view prefix, g::TokenSet& got) {
  const std::vector<int32_t> stops = {eos};
  const size_t n = index.allowed(m, stops, got);
  size_t expected = 0;
  for (size_t id = 0; id < vocab.size(); ++id) {
    const bool want = id == static_cast<size_t>(eos) ? m.can_end() : m.accepts(vocab[id]);
    expected += want;
    CHECK_MESSAGE(g::contains(got, static_cast<int32_t>(id)) == want, "after `", prefix, "`: token `", vocab[id], "`");
  }
  CHECK(n == expected);
  return got;
}

}  // namespace test_mask
