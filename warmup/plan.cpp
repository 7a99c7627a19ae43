#include "warmup/plan.hpp"

#include <algorithm>
#include <set>

namespace inferd::warmup {
namespace {

using kernels::pow2_bucket;

// The burst's lengths: request i ends `kStagger` steps after every request of a
// smaller group (groups of 1, 1, 2, 4, ... requests, longest first), so the
// number still decoding passes through 1, 2, 4, ... and holds for several steps
// even when admission spreads the starts over a step or two.
constexpr int kBurstBase = 8;
constexpr int kStagger = 4;
constexpr int kSeedBurstPrompt = 100;   // ~400 characters
constexpr int kSeedLongPrompt = 3000;   // ~12000 characters
constexpr int kLeastBurstPrompt = 8;

// The buckets each axis has been reached at; `graphs`: the graph sizes run for
// at least two decode steps (recorded, then replayed).
struct Reached {
  explicit Reached(const engine::ShapeAxes& axes)
      : graph_sizes(axes.graph_sizes), token_reps(axes.step_tokens.begin(), axes.step_tokens.end()) {}
  std::vector<int64_t> graph_sizes;
  // A step-token bucket counts only at its representative: ops over whole
  // activations (add, silu_mul) are keyed by tokens x width, whose bucket a
  // smaller step of the same token bucket may not reach (100 x 576 and
  // 128 x 576 lie in different powers of two).
  std::set<int64_t> token_reps;
  std::set<int64_t> tokens, sampled, contexts, decodes, graphs;

  void graph(int64_t running) {
    if (const int64_t g = engine::graph_size_of(graph_sizes, running)) graphs.insert(g);
  }
  void step_tokens(int64_t n) {
    if (token_reps.count(n)) tokens.insert(pow2_bucket(n));
  }
  // A step that only decodes `running` sequences: a captured one runs its kernels
  // at its graph size.
  void decode_tokens(int64_t running) {
    const int64_t g = engine::graph_size_of(graph_sizes, running);
    step_tokens(g > 0 ? g : running);
  }

  // A request alone in the engine: prompt chunks of at most max_num_batched_tokens,
  // then one decode step per generated token but the last.
  void lone(const WarmRequest& r, int chunk) {
    for (int pos = r.unwritten_prefix; pos < r.prompt_tokens;) {
      const int c = std::min(chunk, r.prompt_tokens - pos);
      step_tokens(c);
      contexts.insert(pow2_bucket(pos + c));
      pos += c;
    }
    sampled.insert(1);
    for (int j = 1; j < r.max_tokens; ++j) {
      contexts.insert(pow2_bucket(r.prompt_tokens + j));
      decode_tokens(1);
      decodes.insert(1);
    }
    if (r.max_tokens >= 3) graph(1);
  }
};

// A wave submitted to an idle engine: its first step admits every prompt up to
// max_num_seqs and the token budget.
void first_step(Reached& r, const Wave& w, const PlanLimits& l) {
  int64_t tokens = 0;
  for (size_t i = 0; i < w.size() && static_cast<int>(i) < l.max_num_seqs; ++i)
    tokens += w[i].prompt_tokens - w[i].unwritten_prefix;
  r.step_tokens(std::min<int64_t>(tokens, l.max_num_batched_tokens));
}

// The decode batches a wave's staggered ends guarantee: the number still decoding
// after each distinct length is passed, held for at least kStagger steps.
void staggered_ends(Reached& r, const Wave& w, const PlanLimits& l) {
  if (static_cast<int>(w.size()) > l.max_num_seqs) return;
  std::vector<int> ends;
  for (const WarmRequest& q : w) ends.push_back(q.max_tokens);
  std::sort(ends.begin(), ends.end());
  for (size_t i = 0; i < ends.size(); ++i) {
    const bool holds = i == 0 || ends[i] - ends[i - 1] >= kStagger;
    const int64_t running = static_cast<int64_t>(ends.size() - i);
    if (!holds || ends[i] < 2) continue;
    r.decodes.insert(pow2_bucket(running));
    r.sampled.insert(pow2_bucket(running));
    r.decode_tokens(running);
    if (i > 0 || ends[i] >= 3) r.graph(running);  // the first count's first step is the prefill
  }
}

// What running `w` on an idle engine is sure to reach.
void reach(Reached& r, const Wave& w, const PlanLimits& l) {
  if (w.size() == 1) {
    r.lone(w.front(), l.max_num_batched_tokens);
    return;
  }
  first_step(r, w, l);
  staggered_ends(r, w, l);
}

// The numbers of the burst's requests still decoding as they end, ascending and
// ending with n: every power of two below n and every graph size below n, so each
// decode batch bucket and each graph size has steps of its own.
std::vector<int> burst_counts(int n, const std::vector<int64_t>& graph_sizes) {
  std::set<int> counts{n};
  for (int c = 1; c < n; c *= 2) counts.insert(c);
  for (int64_t g : graph_sizes)
    if (g < n) counts.insert(static_cast<int>(g));
  return {counts.begin(), counts.end()};
}

int burst_size(const PlanLimits& l, const WarmupOptions& o) {
  return std::clamp(o.burst_requests > 0 ? o.burst_requests : l.max_num_seqs, 1, l.max_num_seqs);
}

}  // namespace

int Phase::requests() const {
  int n = 0;
  for (const auto& w : waves) n += static_cast<int>(w.size());
  return n;
}

int Plan::total_requests() const {
  int n = 0;
  for (const auto& p : phases) n += p.requests();
  return n;
}

Depth start_depth(const WarmupOptions& opts) { return opts.depth == "least" ? Depth::least : Depth::full; }

Plan make_plan(const engine::ShapeAxes& axes, const PlanLimits& l, const WarmupOptions& opts, Depth depth) {
  WarmupOptions o = opts;
  const bool least = depth == Depth::least;
  if (least) {
    // Two tokens: the prefill's and one decode step at the prompt's context. The
    // concurrent-long prompts still overlap: the third prefills while the first
    // two take their decode step.
    o.ramp_max_tokens = std::min(o.ramp_max_tokens, 2);
    o.long_max_tokens = std::min(o.long_max_tokens, 2);
    o.sustained_max_tokens = std::min(o.sustained_max_tokens, 2);
  }
  const int B = l.max_num_batched_tokens, M = l.max_model_len;
  auto fit = [&](int prompt, int max_tokens) {
    prompt = std::clamp(prompt, 1, std::max(1, M - 1));
    return WarmRequest{prompt, std::clamp(max_tokens, 1, std::max(1, M - prompt))};
  };
  Plan plan;
  // The phases after the ramp are sized first: a least plan's ramp leaves out the
  // buckets they reach.

  // 2. burst: every request's prompt fits in one step together. Request i ends
  // kStagger steps after those of the next smaller count (burst_counts) it lies
  // beyond, so the number decoding steps down through every count.
  Wave burst;
  const int n = burst_size(l, o);
  const std::vector<int> counts = burst_counts(n, axes.graph_sizes);
  int p = o.burst_prompt_tokens > 0 ? o.burst_prompt_tokens : std::clamp(B / n, 1, kSeedBurstPrompt);
  if (least) p = std::min(p, kLeastBurstPrompt);  // the burst's shapes are its widths, not its prompts
  for (int i = 0; i < n; ++i) {
    const auto later = counts.end() - std::upper_bound(counts.begin(), counts.end(), i);  // counts above i
    burst.push_back(fit(p, kBurstBase + kStagger * static_cast<int>(later - 1)));
  }
  Phase burst_phase{"burst", {std::move(burst)}};

  // 3. concurrent-long: prompts of half a step each, so the third one's prefill
  // shares steps with the first two's decodes.
  Wave longs;
  int lp = o.long_prompt_tokens > 0 ? o.long_prompt_tokens : std::clamp(B / 2, 1, kSeedLongPrompt);
  // Least: just over a third of a step, the shortest prompts whose third still
  // overlaps the first two's decodes (its first chunk fills the first step).
  if (least) lp = std::min(lp, B / 3 + 1);
  for (int i = 0; i < std::max(1, o.long_requests); ++i) longs.push_back(fit(lp, o.long_max_tokens));
  Phase long_phase{"concurrent-long", {std::move(longs)}};

  // 4. sustained: one long decode.
  Phase sustained{"sustained", {{fit(o.sustained_prompt_tokens, o.sustained_max_tokens)}}};

  // 1. ramped: the top context bucket first (a long prompt, if chunks of B do not
  // get there), then every step-token and context bucket still missing. A step
  // wider than the longest prompt is a wave of prompts that fill it together.
  // Least: the buckets the later phases reach are not missing (the burst's and
  // the concurrent-long prompts' first steps are wide ones).
  Phase ramped{"ramped", {}};
  Reached r{axes};
  if (least)
    for (const Phase* ph : {&burst_phase, &long_phase, &sustained})
      for (const Wave& w : ph->waves) reach(r, w, l);
  auto add = [&](Wave w) {
    reach(r, w, l);
    ramped.waves.push_back(std::move(w));
  };
  // A prompt that is there for the context its attention reads. Least: only its
  // last token runs, over an unwritten prefix; the step-token buckets its chunks
  // would reach are reached by the prompts of the step-token loop on their own.
  auto reach_context = [&](int prompt, int max_tokens) {
    WarmRequest q = fit(prompt, max_tokens);
    if (least) q.unwritten_prefix = q.prompt_tokens - 1;
    add({q});
  };
  const int64_t top = axes.contexts.empty() ? 1 : pow2_bucket(axes.contexts.back());
  if (top / 2 + 1 > B) reach_context(static_cast<int>(top / 2 + 1), o.ramp_max_tokens);
  for (int64_t t : axes.step_tokens) {
    if (r.tokens.count(pow2_bucket(t))) continue;
    if (t <= M - 1) {
      add({fit(static_cast<int>(t), o.ramp_max_tokens)});
      continue;
    }
    const int64_t k = (t + M - 2) / (M - 1);  // prompts of at most M - 1 tokens
    Wave w;
    for (int64_t i = 0; i < k; ++i) w.push_back(fit(static_cast<int>(t * (i + 1) / k - t * i / k), 1));
    add(std::move(w));
  }
  for (int64_t c : axes.contexts)
    if (!r.contexts.count(pow2_bucket(c))) reach_context(static_cast<int>(c), 1);
  std::stable_sort(ramped.waves.begin(), ramped.waves.end(), [](const Wave& a, const Wave& b) {
    return a.size() * a.front().prompt_tokens < b.size() * b.front().prompt_tokens;
  });
  plan.phases = {std::move(ramped), std::move(burst_phase), std::move(long_phase), std::move(sustained)};

  return plan;
}

std::vector<std::string> unreached_buckets(const Plan& plan, const engine::ShapeAxes& axes, const PlanLimits& l) {
  Reached r{axes};
  for (const Phase& ph : plan.phases)
    for (const Wave& w : ph.waves) reach(r, w, l);
  std::vector<std::string> out;
  auto check = [&](const char* axis, const std::vector<int64_t>& reps, const std::set<int64_t>& got) {
    for (int64_t v : reps)
      if (!got.count(pow2_bucket(v))) out.push_back(std::string(axis) + " bucket " + std::to_string(pow2_bucket(v)));
  };
  check("step tokens", axes.step_tokens, r.tokens);
  check("sampled sequences", axes.sampled_seqs, r.sampled);
  check("context", axes.contexts, r.contexts);
  check("decode batch", axes.decode_batches, r.decodes);
  for (int64_t g : axes.graph_sizes)
    if (!r.graphs.count(g)) out.push_back("graph size " + std::to_string(g));
  return out;
}

std::string describe(const Plan& plan) {
  std::string out;
  int i = 0;
  for (const Phase& ph : plan.phases) {
    long prompt = 0, gen = 0;
    std::string list;
    for (const Wave& w : ph.waves) {
      list += w.size() > 1 ? " [" : " ";
      for (size_t j = 0; j < w.size(); ++j) {
        prompt += w[j].prompt_tokens, gen += w[j].max_tokens;
        list += (j ? " " : "") + std::to_string(w[j].prompt_tokens) + "/" + std::to_string(w[j].max_tokens);
        if (w[j].unwritten_prefix > 0) list += " (" + std::to_string(w[j].unwritten_prefix) + " unwritten)";
      }
      if (w.size() > 1) list += "]";
    }
    out += std::to_string(++i) + ". " + ph.name + ": " + std::to_string(ph.requests()) + " requests in " +
           std::to_string(ph.waves.size()) + (ph.waves.size() == 1 ? " wave, " : " waves, ") +
           std::to_string(prompt) + " prompt + " + std::to_string(gen) +
           " generated tokens; prompt/max_tokens ([together]):" + list + "\n";
  }
  return out;
}

}  // namespace inferd::warmup
