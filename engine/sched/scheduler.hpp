// The scheduler: which sequences run in the next step and how many tokens each
// feeds. schedule() returns the step as a StepPlan (decode tokens first, then
// prefill chunks of running sequences, then newly admitted ones, within
// max_num_seqs and max_num_batched_tokens, with the KV blocks the KV manager
// gave them); update() takes the tokens sampled from that step and says which
// sequences ended. Under block pressure the newest running sequence not yet in
// the step is preempted: its blocks are freed and it waits, first in line, to be
// recomputed. With a proposer (speculative decoding), a decoding sequence that
// asks for it also feeds the proposer's drafts after its last token, and
// update() keeps the K/V of those the engine accepted and gives back the blocks
// only the rejected ones used. Single-threaded: the engine's step loop owns it.
#pragma once
#include <cstdint>
#include <deque>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/kv/kv_cache_manager.hpp"
#include "engine/sched/step_plan.hpp"
#include "engine/spec/draft_pace.hpp"
#include "engine/spec/proposer.hpp"

namespace inferd::engine {

struct SchedulerLimits {
  int max_num_seqs = 16;
  int max_num_batched_tokens = 512;
  int max_model_len = 2048;  // a sequence that reaches it ends with Length
  // Drafts a decode may carry (with a proposer). A step's logits rows (sampled
  // sequences plus drafts) stay within min(max_num_seqs, max_num_batched_tokens),
  // the widest a step without drafts has, so speculation adds no shape to warm up.
  int num_speculative_tokens = 0;
};

// What the scheduler needs to know of a request.
struct SeqSpec {
  SeqId id = 0;
  std::vector<int32_t> prompt;
  int max_tokens = 16;
  std::vector<int32_t> stop_tokens;  // sampling one ends the sequence with Stop
  bool priority = false;             // queued ahead of everything waiting
  bool speculate = false;            // decode steps may carry drafts (with a proposer)
  int unwritten_prefix = 0;          // first admission: taken as computed, never cached (GenerationRequest)
};

struct SchedulerCounters {
  uint64_t prefix_query_tokens = 0;  // prompt tokens looked up in the prefix cache
  uint64_t prefix_hit_tokens = 0;
  uint64_t preemptions = 0;
  uint64_t steps = 0;
};

class Scheduler {
 public:
  // `proposer` (may be null: no drafts) must outlive the scheduler.
  Scheduler(SchedulerLimits limits, KvCacheManager& kv, Proposer* proposer = nullptr);

  void add(SeqSpec spec);
  // Ends a sequence (cancelled, failed, a stop string matched): frees its blocks
  // and reports it in the next plan's `finished`. False if it is not here.
  bool finish(SeqId seq);
  StepPlan schedule();
  // The plan's scheduled tokens are in the cache now; `sampled` has one token per
  // sequence the plan asked to sample (a step cut short passes none, and then
  // nothing counts as computed). A sequence with drafts has 1 to 1 + num_drafts
  // tokens there, in order: the drafts the caller accepted (equal to them), then
  // the target's own token; the K/V of the rejected drafts are dropped (blocks
  // they alone used go back to the pool; they never enter the prefix cache).
  std::vector<TokenOutcome> update(const StepPlan& plan, std::span<const SampledToken> sampled);
  // Removes every sequence, frees its blocks and forgets the prefix cache;
  // returns their ids, running ones first.
  std::vector<SeqId> clear();

  // Read-only views for the engine and tests.
  struct SeqView {
    std::span<const int32_t> tokens;  // prompt, then what was sampled
    int n_prompt = 0;
    int n_computed = 0;     // positions whose K/V are in the cache
    int cached_tokens = 0;  // prompt tokens the prefix cache served at first admission
    bool running = false;
  };
  SeqView view(SeqId seq) const;  // the sequence must be here
  bool has(SeqId seq) const { return seqs_.count(seq) != 0; }
  size_t num_running() const { return running_.size(); }
  size_t num_waiting() const { return waiting_.size(); }
  bool idle() const { return running_.empty() && waiting_.empty(); }
  const SchedulerCounters& counters() const { return counters_; }

 private:
  struct Seq {
    SeqSpec spec;
    std::vector<int32_t> tokens;
    int n_computed = 0;
    int cached_tokens = 0;
    bool looked_up = false;  // prefix cache consulted for its first admission
    DraftPace pace{0};       // how many drafts its decode steps carry (with a proposer)
    int pending() const { return static_cast<int>(tokens.size()) - n_computed; }
    int n_generated() const { return static_cast<int>(tokens.size() - spec.prompt.size()); }
  };
  bool make_room(SeqId seq, int total_tokens, StepPlan& plan);
  void preempt(SeqId victim, StepPlan& plan);
  void put(StepPlan& plan, Seq& s, int n, std::vector<int32_t> drafts = {});
  std::unordered_map<SeqId, std::vector<int32_t>> propose_drafts(int budget);
  void fit_logits_rows(StepPlan& plan);
  void cache_computed(SeqId id, const Seq& s);

  SchedulerLimits limits_;
  KvCacheManager& kv_;
  Proposer* proposer_;
  std::unordered_map<SeqId, Seq> seqs_;
  std::vector<SeqId> running_;  // oldest first
  std::deque<SeqId> waiting_;
  std::vector<SeqId> finished_;  // since the last plan
  SchedulerCounters counters_;
};

}  // namespace inferd::engine
