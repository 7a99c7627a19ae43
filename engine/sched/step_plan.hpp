// One engine step as a plain value: what the scheduler decided, and what came of
// it. The plan is all a rank needs to run the step's forward pass (tokens,
// positions, block tables), so the head of a tensor-parallel group can send it
// to its workers as it is.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/kv/kv_cache_manager.hpp"

namespace inferd::engine {

// One sequence's share of a step: `tokens` are fed at positions start,
// start + 1, ...; `block_table` covers every position up to the last of them.
// A decode with drafts (speculative decoding) feeds its last token and then
// `num_drafts` proposed tokens, and wants logits at each of those 1 + num_drafts
// positions: they verify the drafts and give the token after the last accepted one.
struct ScheduledSeq {
  SeqId seq = 0;
  int32_t start = 0;
  std::vector<int32_t> tokens;
  std::vector<int32_t> block_table;
  bool sample = false;  // the step reaches the sequence's last token: its logits give the next one
  int32_t num_drafts = 0;  // the last num_drafts of `tokens` are drafts (only when sample)
  // The rows of logits the step returns for this sequence, in plan order.
  int logits_rows() const { return sample ? 1 + num_drafts : 0; }
};

struct StepPlan {
  uint64_t step = 0;
  std::vector<ScheduledSeq> seqs;    // decodes first, then prefill chunks, then newly admitted
  std::vector<SeqId> preempted;      // lost their K/V this step; they wait to be recomputed
  std::vector<SeqId> finished;       // ended since the previous plan; their blocks are free

  int num_tokens() const;
  int num_logits_rows() const;
  // Tokens x context: what a step's duration grows with (its matmuls with the
  // tokens, its attention with both); step deadlines scale with it.
  uint64_t work() const;
  // Every sequence feeds exactly one token it samples from: what a captured decode graph replays.
  bool decode_only() const;
  bool empty() const { return seqs.empty(); }
};

enum class FinishReason { None, Stop, Length, Cancelled, Error };
const char* to_string(FinishReason r);

// A token sampled for a sequence the plan asked to sample.
struct SampledToken {
  SeqId seq = 0;
  int32_t token = 0;
};

// What update() made of a sampled token: the sequence has it now, and may have ended.
struct TokenOutcome {
  SeqId seq = 0;
  int32_t token = 0;
  FinishReason finish = FinishReason::None;  // Stop (a stop token) or Length, or None
  size_t sampled_index = 0;  // which of update()'s `sampled` it is
};

}  // namespace inferd::engine
