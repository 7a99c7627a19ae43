// The warm-up plan: four phases of real requests, sized from the engine's shape
// space so that together they reach every bucket of every axis.
//   1. ramped          sequential prompts of increasing size: every step-token
//                      bucket, and one prompt long enough for the top context bucket
//                      (a step wider than one prompt can be is a wave of several)
//   2. burst           concurrent short requests whose lengths are staggered so the
//                      number decoding together steps through every decode batch bucket
//                      and every graph size (each recorded, then replayed)
//   3. concurrent-long concurrent long prompts: prefill chunks and decodes in one step
//   4. sustained       one long decode that cannot end early (ignore_eos)
// The seed profile (prompts of 2000..48000 characters, 4 x 150-token bursts,
// 3 x 12000 characters, a 700-token essay) is scaled to the configuration.
#pragma once
#include <string>
#include <vector>

#include "engine/shape_space.hpp"

namespace inferd::warmup {

// How much each request generates. Full: the lengths configured (the seed
// profile: ramp prompts that generate for a while, a 700-token sustained decode).
// Least: the same phases, waves and prompts, each request generating only what
// the plan's coverage needs (one decode step, the burst's staggered ends kept),
// and the prompt that reaches the top context bucket runs only its last token
// over an unwritten prefix: a recovery's re-warm, which must touch every shape
// key again but need not prove again what the first warm-up of this process
// proved.
enum class Depth { full, least };

// The [warmup] configuration section.
struct WarmupOptions {
  bool enable = true;
  // "full" or "least": the start-up's and an operator's re-run's plan (a
  // recovery always runs least, a retry always full; see start_depth).
  std::string depth = "full";
  int retries = 2;                // failed runs retried before start-up fails
  double retry_delay_s = 2.0;
  double phase_timeout_s = 300;   // a phase still running after this fails
  int ramp_max_tokens = 20;       // tokens generated after each ramped prompt
  int burst_requests = 0;         // 0: max_num_seqs
  int burst_prompt_tokens = 0;    // 0: max_num_batched_tokens / requests, at most 100
  int long_requests = 3;
  int long_prompt_tokens = 0;     // 0: half of max_num_batched_tokens, at most 3000
  int long_max_tokens = 40;
  int sustained_prompt_tokens = 100;
  int sustained_max_tokens = 700;
  bool operator==(const WarmupOptions&) const = default;
};

// What the configuration lets a request be.
struct PlanLimits {
  int max_model_len = 0;
  int max_num_seqs = 0;
  int max_num_batched_tokens = 0;
};

struct WarmRequest {
  int prompt_tokens = 0;
  int max_tokens = 0;  // generated with ignore_eos: exactly this many
  // Leading prompt tokens taken as computed, not run (least depth's top-context
  // request: engine::GenerationRequest::unwritten_prefix).
  int unwritten_prefix = 0;
};

// A phase runs its waves one after another; a wave's requests are submitted
// together, so they start in the same step.
using Wave = std::vector<WarmRequest>;

struct Phase {
  std::string name;
  std::vector<Wave> waves;
  int requests() const;
};

struct Plan {
  std::vector<Phase> phases;
  int total_requests() const;
};

Plan make_plan(const engine::ShapeAxes& axes, const PlanLimits& limits, const WarmupOptions& opts,
               Depth depth = Depth::full);

// The depth `opts.depth` names (config validation admits only the two names).
Depth start_depth(const WarmupOptions& opts);

// The axis buckets the plan is sure to reach, predicted from how the scheduler
// runs a lone request (chunks of max_num_batched_tokens, then one token per step),
// the first step of a wave (every prompt admitted at once, up to the token budget)
// and a wave's staggered ends; what it misses, one line per bucket.
std::vector<std::string> unreached_buckets(const Plan& plan, const engine::ShapeAxes& axes, const PlanLimits& limits);

// Human-readable plan: one line per phase.
std::string describe(const Plan& plan);

}  // namespace inferd::warmup
