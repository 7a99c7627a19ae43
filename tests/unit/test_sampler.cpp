// Sampling: greedy, each truncation filter's exact support, seeds, frequencies,
// penalties and raw logprobs.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

#include "engine/sampler.hpp"

using inferd::engine::Sampler;
using inferd::engine::SamplingParams;
using inferd::engine::sampling_distribution;

namespace {

using Dist = std::vector<std::pair<int32_t, float>>;

std::vector<float> log_of(std::vector<float> probs) {
  for (float& p : probs) p = std::log(p);
  return probs;
}

// Distribution with the given parameters, compared entry by entry.
void check_dist(const std::vector<float>& logits, const SamplingParams& p, const Dist& expected) {
  const Dist got = sampling_distribution(logits, p);
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CHECK(got[i].first == expected[i].first);
    CHECK(got[i].second == doctest::Approx(expected[i].second).epsilon(1e-5));
  }
}

SamplingParams with(float temperature, uint64_t seed = 1) {
  SamplingParams p;
  p.temperature = temperature;
  p.seed = seed;
  return p;
}

// Draws n tokens from fixed logits; returns each token's frequency.
std::map<int32_t, double> frequencies(const SamplingParams& p, const std::vector<float>& logits, int n) {
  Sampler s(p);
  std::map<int32_t, double> f;
  for (int i = 0; i < n; ++i) {
    std::vector<float> l = logits;
    f[s.sample(l, {}, {}).token] += 1.0 / n;
  }
  return f;
}

std::vector<float> random_logits(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> l(n);
  for (float& x : l) x = d(g);
  return l;
}

}  // namespace

TEST_CASE("sampler: parameter validation") {
  CHECK_FALSE(SamplingParams{}.invalid_reason());
  auto bad = [](auto set) {
    SamplingParams p;
    set(p);
    CHECK(p.invalid_reason());
    CHECK_THROWS_AS(Sampler{p}, std::invalid_argument);
  };
  bad([](SamplingParams& p) { p.temperature = -0.1f; });
  bad([](SamplingParams& p) { p.temperature = NAN; });
  bad([](SamplingParams& p) { p.top_k = -2; });
  bad([](SamplingParams& p) { p.top_p = 0.0f; });
  bad([](SamplingParams& p) { p.top_p = 1.5f; });
  bad([](SamplingParams& p) { p.min_p = -0.1f; });
  bad([](SamplingParams& p) { p.repetition_penalty = 0.0f; });
  bad([](SamplingParams& p) { p.presence_penalty = 2.5f; });
  bad([](SamplingParams& p) { p.frequency_penalty = -3.0f; });
  bad([](SamplingParams& p) { p.logprobs = 21; });
  bad([](SamplingParams& p) { p.logprobs = -2; });
  SamplingParams p;
  p.top_p = 0.0f;
  CHECK(p.invalid_reason()->find("top_p") != std::string::npos);
}

TEST_CASE("sampler: greedy is the argmax, first on ties, and leaves logits alone") {
  Sampler s(with(0.0f));
  CHECK(s.params().greedy());
  std::vector<float> l{-1.0f, 3.0f, 2.0f, 3.0f, -5.0f};
  CHECK(s.sample(l, {}, {}).token == 1);
  CHECK(l == std::vector<float>{-1.0f, 3.0f, 2.0f, 3.0f, -5.0f});
  std::vector<float> negative{-4.0f, -3.0f, -7.0f};
  CHECK(s.sample(negative, {}, {}).token == 1);
  // Without a seed greedy is still deterministic.
  SamplingParams unseeded;
  unseeded.temperature = 0.0f;
  Sampler u(unseeded);
  const auto big = random_logits(49152, 3);
  std::vector<float> copy = big;
  CHECK(u.sample(copy, {}, {}).token == std::max_element(big.begin(), big.end()) - big.begin());
  check_dist(big, unseeded, {{static_cast<int32_t>(std::max_element(big.begin(), big.end()) - big.begin()), 1.0f}});
}

TEST_CASE("sampler: temperature and each filter's exact support") {
  const auto l = log_of({0.5f, 0.3f, 0.2f});
  check_dist(l, with(1.0f), {{0, 0.5f}, {1, 0.3f}, {2, 0.2f}});
  // Temperature 0.5 squares the probabilities.
  check_dist(l, with(0.5f), {{0, 0.25f / 0.38f}, {1, 0.09f / 0.38f}, {2, 0.04f / 0.38f}});

  SUBCASE("top-k") {
    auto p = with(1.0f);
    p.top_k = 2;
    check_dist(l, p, {{0, 0.625f}, {1, 0.375f}});
    p.top_k = 1;
    check_dist(l, p, {{0, 1.0f}});
    for (int off : {0, -1, 3, 100}) {
      p.top_k = off;
      CHECK(sampling_distribution(l, p).size() == 3);
    }
  }
  SUBCASE("top-p") {
    const auto u = log_of({0.1f, 0.5f, 0.15f, 0.25f});
    auto p = with(1.0f);
    p.top_p = 0.7f;
    check_dist(u, p, {{1, 0.5f / 0.75f}, {3, 0.25f / 0.75f}});
    p.top_p = 0.4f;
    check_dist(u, p, {{1, 1.0f}});
    p.top_p = 0.8f;
    check_dist(u, p, {{1, 0.5f / 0.9f}, {2, 0.15f / 0.9f}, {3, 0.25f / 0.9f}});
  }
  SUBCASE("top-p over a large vocabulary matches a full sort") {
    auto big = random_logits(5000, 11);
    for (float top_p : {0.3f, 0.9f, 0.99f}) {
      auto p = with(1.0f);
      p.top_p = top_p;
      std::vector<int32_t> order(big.size());
      std::iota(order.begin(), order.end(), 0);
      std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return big[a] > big[b]; });
      double total = 0, cumulative = 0;
      for (float x : big) total += std::exp(double(x) - big[order[0]]);
      size_t keep = 0;
      while (cumulative < top_p * total) cumulative += std::exp(double(big[order[keep++]]) - big[order[0]]);
      std::vector<int32_t> expected(order.begin(), order.begin() + long(keep));
      std::sort(expected.begin(), expected.end());
      std::vector<int32_t> got;
      for (auto [t, prob] : sampling_distribution(big, p)) got.push_back(t);
      CHECK(got == expected);
      CHECK(keep > 1);
    }
  }
  SUBCASE("top-p among equal logits keeps the lowest token ids") {
    const std::vector<float> flat(100, 0.25f);
    auto p = with(1.0f);
    p.top_p = 0.5f;
    const Dist got = sampling_distribution(flat, p);
    REQUIRE(got.size() == 50);
    CHECK(got.front().first == 0);
    CHECK(got.back().first == 49);
    CHECK(got[7].second == doctest::Approx(0.02f));
  }
  SUBCASE("min-p") {
    const auto m = log_of({0.5f, 0.3f, 0.15f, 0.05f});
    auto p = with(1.0f);
    p.min_p = 0.25f;  // keeps probabilities >= 0.125
    check_dist(m, p, {{0, 0.5f / 0.95f}, {1, 0.3f / 0.95f}, {2, 0.15f / 0.95f}});
    p.min_p = 0.61f;  // 0.3 / 0.5 = 0.6 falls just short
    check_dist(m, p, {{0, 1.0f}});
  }
  SUBCASE("top-k runs before top-p") {
    auto p = with(1.0f);
    p.top_k = 2;    // leaves {0.625, 0.375}
    p.top_p = 0.6f;  // which the first token alone reaches (it would not over all three)
    check_dist(l, p, {{0, 1.0f}});
  }
}

TEST_CASE("sampler: draws only from the support") {
  const auto l = log_of({0.4f, 0.3f, 0.2f, 0.1f});
  auto p = with(1.0f, 5);
  p.top_k = 2;
  const auto f = frequencies(p, l, 2000);
  CHECK(f.size() == 2);
  CHECK(f.count(0) == 1);
  CHECK(f.count(1) == 1);
  // NaN and -inf logits are never drawn.
  std::vector<float> odd{NAN, 1.0f, -INFINITY, 1.0f};
  const auto g = frequencies(with(1.0f, 6), odd, 500);
  CHECK(g.size() == 2);
  CHECK(g.count(1) == 1);
  CHECK(g.count(3) == 1);
}

TEST_CASE("sampler: the same seed repeats, another seed differs") {
  const auto l = random_logits(1000, 4);
  auto run = [&](uint64_t seed) {
    Sampler s(with(1.0f, seed));
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) {
      std::vector<float> copy = l;
      out.push_back(s.sample(copy, {}, {}).token);
    }
    return out;
  };
  CHECK(run(42) == run(42));
  CHECK(run(42) != run(43));
}

TEST_CASE("sampler: temperature sampling frequencies follow the distribution") {
  const auto l = log_of({0.5f, 0.3f, 0.2f});
  const int n = 20000;  // one standard deviation is at most 0.0036; allow 4
  const auto f1 = frequencies(with(1.0f, 9), l, n);
  CHECK(std::abs(f1.at(0) - 0.5) < 0.015);
  CHECK(std::abs(f1.at(1) - 0.3) < 0.015);
  CHECK(std::abs(f1.at(2) - 0.2) < 0.015);
  const auto f2 = frequencies(with(0.5f, 10), l, n);
  CHECK(std::abs(f2.at(0) - 0.25 / 0.38) < 0.015);
  CHECK(std::abs(f2.at(1) - 0.09 / 0.38) < 0.015);
  CHECK(std::abs(f2.at(2) - 0.04 / 0.38) < 0.015);
}

TEST_CASE("sampler: repetition, frequency and presence penalties") {
  auto p = with(0.0f);
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  p.logprobs = 0;
  Sampler s(p);
  const std::vector<float> raw{2.0f, -2.0f, 1.0f, 0.5f, 0.9f};
  const std::vector<int32_t> context{0, 1, 0, 2, 2};  // prompt {0, 1}, output {0, 2, 2}
  const std::span<const int32_t> generated(context.begin() + 2, context.end());
  for (int round = 0; round < 2; ++round) {  // scratch state must not leak between steps
    std::vector<float> l = raw;
    const auto r = s.sample(l, context, generated);
    // 0: 2 / 2 - 0.5 * 1 - 0.25; 1: -2 * 2 (prompt only); 2: 1 / 2 - 0.5 * 2 - 0.25.
    CHECK(l[0] == doctest::Approx(0.25f));
    CHECK(l[1] == doctest::Approx(-4.0f));
    CHECK(l[2] == doctest::Approx(-0.75f));
    CHECK(l[3] == 0.5f);
    CHECK(l[4] == 0.9f);
    CHECK(r.token == 4);  // the raw argmax is token 0
    // The reported logprob is the raw one.
    double z = 0;
    for (float x : raw) z += std::exp(x);
    CHECK(r.logprob == doctest::Approx(0.9 - std::log(z)));
  }
  // A token id outside the vocabulary is an error and leaves the sampler usable.
  std::vector<float> bad = raw;
  const std::vector<int32_t> oob{0, 7};
  CHECK_THROWS_AS(s.sample(bad, oob, {}), std::out_of_range);
  CHECK(bad == raw);
  std::vector<float> again = raw;
  s.sample(again, context, generated);
  CHECK(again[0] == doctest::Approx(0.25f));

  // A repetition penalty below 1 raises seen tokens instead.
  auto boost = with(0.0f);
  boost.repetition_penalty = 0.5f;
  Sampler b(boost);
  std::vector<float> m{1.0f, 1.5f, -1.0f};
  const std::vector<int32_t> seen{0, 2};
  CHECK(b.sample(m, seen, {}).token == 0);
  CHECK(m == std::vector<float>{2.0f, 1.5f, -0.5f});
}

TEST_CASE("sampler: logprobs are the raw log-softmax with the top alternatives") {
  const auto l = random_logits(20, 8);
  double z = 0;
  for (float x : l) z += std::exp(double(x));
  auto p = with(0.7f, 3);
  p.logprobs = 20;
  p.top_k = 3;
  p.repetition_penalty = 1.3f;
  Sampler s(p);
  std::vector<float> copy = l;
  std::vector<int32_t> ctx(20);  // every token is penalized, yet logprobs stay raw
  std::iota(ctx.begin(), ctx.end(), 0);
  const auto r = s.sample(copy, ctx, ctx);
  REQUIRE(r.top.size() == 20);
  double sum = 0;
  for (size_t i = 0; i < r.top.size(); ++i) {
    const auto [t, lp] = r.top[i];
    CHECK(lp == doctest::Approx(l[t] - std::log(z)).epsilon(1e-5));
    if (i > 0) CHECK(lp <= r.top[i - 1].second);
    sum += std::exp(double(lp));
  }
  CHECK(sum == doctest::Approx(1.0).epsilon(1e-5));
  CHECK(r.logprob == doctest::Approx(l[r.token] - std::log(z)).epsilon(1e-5));

  auto few = with(1.0f, 3);
  few.logprobs = 2;
  Sampler f(few);
  std::vector<float> c2 = l;
  const auto r2 = f.sample(c2, {}, {});
  REQUIRE(r2.top.size() == 2);
  CHECK(r2.top[0].first == std::max_element(l.begin(), l.end()) - l.begin());
  CHECK(r2.top[0].second <= 0.0f);

  auto none = with(1.0f, 3);
  Sampler n(none);
  std::vector<float> c3 = l;
  CHECK(n.sample(c3, {}, {}).top.empty());
}
