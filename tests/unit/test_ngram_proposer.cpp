// The prompt-lookup proposer on plain token lists: which earlier occurrences it
// follows, how long a match it needs, and how many drafts it returns.
#include <doctest/doctest.h>

#include <stdexcept>
#include <vector>

#include "engine/spec/ngram_proposer.hpp"

using inferd::engine::DraftRequest;
using inferd::engine::NgramOptions;
using inferd::engine::NgramProposer;
using V = std::vector<int32_t>;

TEST_CASE("ngram proposer: proposes what followed the last n tokens' earlier occurrence") {
  NgramProposer p({.num_speculative_tokens = 3, .prompt_lookup_min = 2, .prompt_lookup_max = 3});
  // ... 1 2 3 | 4 5 6 ... then 1 2 3 again: drafts 4 5 6.
  CHECK(p.lookup(V{9, 1, 2, 3, 4, 5, 6, 7, 1, 2, 3}, 5) == V{4, 5, 6});
  // At most k (and at most num_speculative_tokens).
  CHECK(p.lookup(V{9, 1, 2, 3, 4, 5, 6, 7, 1, 2, 3}, 2) == V{4, 5});
  CHECK(p.lookup(V{1, 2, 3, 4, 1, 2}, 5) == V{3, 4, 1});
  CHECK(p.lookup(V{5, 1, 2, 8, 1, 2}, 3) == V{8, 1, 2});
}

TEST_CASE("ngram proposer: the most recent occurrence wins, and longer matches before shorter") {
  NgramProposer p({.num_speculative_tokens = 2, .prompt_lookup_min = 1, .prompt_lookup_max = 3});
  // "2" was followed by 10 first, by 20 later: the later one.
  CHECK(p.lookup(V{2, 10, 2, 20, 2}, 1) == V{20});
  // "1 2" followed by 30 beats the more recent lone "2" followed by 40.
  CHECK(p.lookup(V{1, 2, 30, 2, 40, 1, 2}, 1) == V{30});
}

TEST_CASE("ngram proposer: earlier occurrences vote; drafts stop where they disagree too much") {
  NgramProposer p({.num_speculative_tokens = 4, .prompt_lookup_min = 2, .prompt_lookup_max = 2});
  // "1 2" was followed by 5, 5, then 6: two votes for 5 beat the most recent 6.
  CHECK(p.lookup(V{1, 2, 5, 1, 2, 5, 1, 2, 6, 1, 2}, 1) == V{5});
  // Those that voted for the draft go on: after 5 came 7 both times.
  CHECK(p.lookup(V{1, 2, 5, 7, 1, 2, 6, 8, 1, 2, 5, 7, 1, 2}, 2) == V{5, 7});
  // Four occurrences, four different continuations: nothing to predict.
  CHECK(p.lookup(V{1, 2, 3, 1, 2, 4, 1, 2, 5, 1, 2, 6, 1, 2}, 4).empty());
  // Three that disagree are still a third each: the most recent is drafted,
  // then what followed it alone.
  CHECK(p.lookup(V{1, 2, 3, 1, 2, 4, 1, 2, 5, 1, 2}, 3) == V{5, 1, 2});
}

TEST_CASE("ngram proposer: no proposal without a match of at least prompt_lookup_min tokens") {
  NgramProposer p({.num_speculative_tokens = 4, .prompt_lookup_min = 2, .prompt_lookup_max = 4});
  CHECK(p.lookup(V{1, 2, 3, 4, 5}, 4).empty());
  CHECK(p.lookup(V{1, 2, 3, 4, 1}, 4).empty());  // only a 1-token match
  CHECK(p.lookup(V{7}, 4).empty());
  CHECK(p.lookup(V{}, 4).empty());
  CHECK(p.lookup(V{1, 2, 1, 2}, 0).empty());  // no room: nothing
}

TEST_CASE("ngram proposer: a continuation that reaches the end goes on into its own drafts") {
  NgramProposer p({.num_speculative_tokens = 6, .prompt_lookup_min = 2, .prompt_lookup_max = 3});
  // A run of one token: the match is one token back; the run goes on.
  CHECK(p.lookup(V{5, 5, 5, 5}, 4) == V{5, 5, 5, 5});
  // A period of three, matched one period back: whole periods.
  CHECK(p.lookup(V{1, 2, 3, 1, 2, 3, 1, 2}, 6) == V{3, 1, 2, 3, 1, 2});
  // "1 2" was followed by 9 1 2, which is the end: 9 1 2, then 9 1 2 again.
  CHECK(p.lookup(V{7, 1, 2, 9, 1, 2}, 5) == V{9, 1, 2, 9, 1});
  // A continuation long enough stays as it was.
  CHECK(p.lookup(V{1, 2, 3, 4, 5, 6, 7, 8, 1, 2}, 6) == V{3, 4, 5, 6, 7, 8});
}

TEST_CASE("ngram proposer: one answer per request, each within its own room") {
  NgramProposer p({.num_speculative_tokens = 3, .prompt_lookup_min = 1, .prompt_lookup_max = 2});
  const V a{1, 2, 3, 1, 2}, b{4, 5, 6}, c{7, 8, 7};
  const std::vector<DraftRequest> reqs{{1, a, 3}, {2, b, 3}, {3, c, 1}};
  std::vector<V> drafts{V{99}};
  p.propose(reqs, drafts);
  REQUIRE(drafts.size() == 3);
  CHECK(drafts[0] == V{3, 1, 2});
  CHECK(drafts[1].empty());
  CHECK(drafts[2] == V{8});
}

TEST_CASE("ngram proposer: bad options are refused, naming the option") {
  CHECK_THROWS_WITH_AS(NgramProposer({.num_speculative_tokens = 0}), doctest::Contains("num_speculative_tokens"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(NgramProposer({.num_speculative_tokens = 2, .prompt_lookup_min = 0}),
                       doctest::Contains("prompt_lookup_min"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(NgramProposer({.num_speculative_tokens = 2, .prompt_lookup_min = 3, .prompt_lookup_max = 2}),
                       doctest::Contains("prompt_lookup_max"), std::invalid_argument);
}
