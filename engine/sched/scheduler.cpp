#include "engine/sched/scheduler.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace inferd::engine {

Scheduler::Scheduler(SchedulerLimits limits, KvCacheManager& kv, Proposer* proposer)
    : limits_(limits), kv_(kv), proposer_(limits.num_speculative_tokens > 0 ? proposer : nullptr) {}

void Scheduler::add(SeqSpec spec) {
  if (spec.prompt.empty()) throw std::invalid_argument("scheduler: empty prompt");
  if (seqs_.count(spec.id)) throw std::invalid_argument("scheduler: sequence " + std::to_string(spec.id) + " exists");
  const SeqId id = spec.id;
  Seq s;
  s.tokens = spec.prompt;
  s.pace = proposer_ ? DraftPace(limits_.num_speculative_tokens, proposer_->draft_cost())
                    : DraftPace(limits_.num_speculative_tokens);
  const bool first = spec.priority;
  s.spec = std::move(spec);
  seqs_.emplace(id, std::move(s));
  if (first) waiting_.push_front(id);
  else waiting_.push_back(id);
}

bool Scheduler::finish(SeqId seq) {
  if (!seqs_.erase(seq)) return false;
  std::erase(running_, seq);
  std::erase(waiting_, seq);
  kv_.free(seq);
  if (proposer_) proposer_->release(seq);
  finished_.push_back(seq);
  return true;
}

Scheduler::SeqView Scheduler::view(SeqId seq) const {
  const Seq& s = seqs_.at(seq);
  const bool running = std::find(running_.begin(), running_.end(), seq) != running_.end();
  return {s.tokens, static_cast<int>(s.spec.prompt.size()), s.n_computed, s.cached_tokens, running};
}

void Scheduler::put(StepPlan& plan, Seq& s, int n, std::vector<int32_t> drafts) {
  ScheduledSeq ss;
  ss.seq = s.spec.id;
  ss.start = s.n_computed;
  ss.tokens.assign(s.tokens.begin() + s.n_computed, s.tokens.begin() + s.n_computed + n);
  ss.tokens.insert(ss.tokens.end(), drafts.begin(), drafts.end());
  ss.num_drafts = static_cast<int32_t>(drafts.size());
  ss.block_table = kv_.block_table(ss.seq);
  ss.sample = s.n_computed + n == static_cast<int>(s.tokens.size());
  plan.seqs.push_back(std::move(ss));
}

// The drafts each decoding sequence carries this step, asked of the proposer
// in one call (a draft model drafts for all of them in the same forwards): no
// more than its pace allows, than the token budget left after its own token
// and the decodes before it with all their drafts, than it may still generate
// past this step's token, or than fit before max_model_len (the last fed
// position stays below max_model_len - 1, as without drafts).
std::unordered_map<SeqId, std::vector<int32_t>> Scheduler::propose_drafts(int budget) {
  std::unordered_map<SeqId, std::vector<int32_t>> out;
  if (proposer_ == nullptr) return out;
  std::vector<DraftRequest> reqs;
  for (SeqId id : running_) {
    if (budget <= 0) break;
    Seq& s = seqs_.at(id);
    if (s.pending() != 1) continue;
    const int room = !s.spec.speculate ? 0
                                       : std::min({s.pace.next(), budget - 1, s.spec.max_tokens - s.n_generated() - 1,
                                                   limits_.max_model_len - static_cast<int>(s.tokens.size()) - 1});
    budget -= 1 + std::max(room, 0);
    if (room > 0) reqs.push_back({id, s.tokens, room});
  }
  if (reqs.empty()) return out;
  std::vector<std::vector<int32_t>> drafts;
  proposer_->propose(reqs, drafts);
  for (size_t i = 0; i < reqs.size() && i < drafts.size(); ++i) {
    if (static_cast<int>(drafts[i].size()) > reqs[i].max_drafts) drafts[i].resize(static_cast<size_t>(reqs[i].max_drafts));
    if (!drafts[i].empty()) out.emplace(reqs[i].seq, std::move(drafts[i]));
  }
  return out;
}

// Drafts are dropped, newest sequence first, until the step's logits rows fit
// the widest step without drafts (see SchedulerLimits::num_speculative_tokens).
void Scheduler::fit_logits_rows(StepPlan& plan) {
  const int most = std::min(limits_.max_num_seqs, limits_.max_num_batched_tokens);
  int excess = plan.num_logits_rows() - most;
  for (auto it = plan.seqs.rbegin(); it != plan.seqs.rend() && excess > 0; ++it) {
    const int cut = std::min(excess, static_cast<int>(it->num_drafts));
    it->num_drafts -= cut;
    it->tokens.resize(it->tokens.size() - cut);
    kv_.trim(it->seq, it->start + static_cast<int>(it->tokens.size()));
    it->block_table = kv_.block_table(it->seq);
    excess -= cut;
  }
}

void Scheduler::preempt(SeqId victim, StepPlan& plan) {
  // Recompute preemption: its K/V are dropped and rebuilt when it is readmitted.
  kv_.free(victim);
  seqs_.at(victim).n_computed = 0;
  std::erase(running_, victim);
  waiting_.push_front(victim);
  plan.preempted.push_back(victim);
  ++counters_.preemptions;
}

bool Scheduler::make_room(SeqId seq, int total_tokens, StepPlan& plan) {
  auto in_plan = [&](SeqId id) {
    return std::any_of(plan.seqs.begin(), plan.seqs.end(), [&](const auto& ss) { return ss.seq == id; });
  };
  while (!kv_.allocate_slots(seq, total_tokens)) {
    // The newest running sequence that is not already in this step gives way.
    auto victim = std::find_if(running_.rbegin(), running_.rend(), [&](SeqId c) { return c != seq && !in_plan(c); });
    if (victim == running_.rend()) return false;
    preempt(*victim, plan);
  }
  return true;
}

StepPlan Scheduler::schedule() {
  StepPlan plan;
  plan.step = counters_.steps + 1;
  plan.finished.swap(finished_);
  int budget = limits_.max_num_batched_tokens;

  // Decode tokens first, then prefill chunks of sequences already running.
  const std::vector<SeqId> order = running_;
  auto proposed = propose_drafts(budget);
  for (int pass = 0; pass < 2; ++pass) {
    for (SeqId id : order) {
      if (budget <= 0) break;
      if (std::find(running_.begin(), running_.end(), id) == running_.end()) continue;  // preempted meanwhile
      Seq& s = seqs_.at(id);
      const bool decode = s.pending() == 1;
      if ((pass == 0) != decode) continue;
      const int n = std::min(s.pending(), budget);
      // Drafts never preempt anyone: without free blocks for them, the decode goes alone.
      std::vector<int32_t> drafts;
      if (auto it = proposed.find(id); decode && it != proposed.end()) drafts = std::move(it->second);
      if (static_cast<int>(drafts.size()) > budget - n) drafts.resize(static_cast<size_t>(std::max(0, budget - n)));
      const int d = static_cast<int>(drafts.size());
      if (d > 0 && !kv_.allocate_slots(id, s.n_computed + n + d)) drafts.clear();
      if (make_room(id, s.n_computed + n, plan)) {
        budget -= n + static_cast<int>(drafts.size());
        put(plan, s, n, std::move(drafts));
      }
    }
  }

  // Admit waiting sequences, oldest (and preempted) first, while there is room.
  while (!waiting_.empty() && budget > 0 && static_cast<int>(running_.size()) < limits_.max_num_seqs) {
    const SeqId id = waiting_.front();
    Seq& s = seqs_.at(id);
    // A warm-up's unwritten prefix stands in for a prefix hit at its first admission;
    // preempted, the sequence is recomputed in full.
    const bool unwritten = s.n_computed == 0 && !s.looked_up && s.spec.unwritten_prefix > 0;
    const int hit = s.n_computed == 0 && !unwritten ? kv_.computed_blocks(id, s.tokens) : 0;
    s.n_computed += unwritten ? s.spec.unwritten_prefix : hit;
    const int n = std::min(s.pending(), budget);
    if (!kv_.allocate_slots(id, s.n_computed + n)) {
      kv_.free(id);  // also the prefix blocks it took; it is tried again next step
      s.n_computed = 0;
      break;
    }
    if (!s.looked_up && s.n_generated() == 0) {
      s.looked_up = true;
      s.cached_tokens = hit;
      counters_.prefix_query_tokens += s.tokens.size();
      counters_.prefix_hit_tokens += hit;
    }
    waiting_.pop_front();
    running_.push_back(id);
    put(plan, s, n);
    budget -= n;
  }
  if (proposer_ != nullptr) fit_logits_rows(plan);
  return plan;
}

std::vector<TokenOutcome> Scheduler::update(const StepPlan& plan, std::span<const SampledToken> sampled) {
  ++counters_.steps;
  std::vector<SeqId> verified;  // sequences that fed drafts: registered once their accepted tokens are in
  for (const auto& ss : plan.seqs) {
    auto it = seqs_.find(ss.seq);
    if (it == seqs_.end()) continue;  // ended while the step ran
    Seq& s = it->second;
    if (ss.num_drafts == 0) {
      s.n_computed += static_cast<int>(ss.tokens.size());
      cache_computed(ss.seq, s);
      continue;
    }
    // The accepted drafts' K/V stay; positions past them are written again next step.
    const auto mine = std::count_if(sampled.begin(), sampled.end(), [&](const auto& t) { return t.seq == ss.seq; });
    const int accepted = std::clamp(static_cast<int>(mine) - 1, 0, static_cast<int>(ss.num_drafts));
    if (!sampled.empty()) s.pace.record(ss.num_drafts, accepted);
    s.n_computed += static_cast<int>(ss.tokens.size()) - ss.num_drafts + accepted;
    kv_.trim(ss.seq, s.n_computed);
    verified.push_back(ss.seq);
  }
  std::vector<TokenOutcome> out;
  out.reserve(sampled.size());
  for (size_t i = 0; i < sampled.size(); ++i) {
    const SampledToken& t = sampled[i];
    auto it = seqs_.find(t.seq);
    if (it == seqs_.end()) continue;  // ended (also: by an earlier token of this step)
    Seq& s = it->second;
    s.tokens.push_back(t.token);
    if (std::find(verified.begin(), verified.end(), t.seq) != verified.end())
      cache_computed(t.seq, s);
    TokenOutcome o{t.seq, t.token, FinishReason::None, i};
    const auto& stops = s.spec.stop_tokens;
    if (std::find(stops.begin(), stops.end(), t.token) != stops.end()) o.finish = FinishReason::Stop;
    else if (s.n_generated() >= s.spec.max_tokens || static_cast<int>(s.tokens.size()) >= limits_.max_model_len)
      o.finish = FinishReason::Length;
    if (o.finish != FinishReason::None) finish(t.seq);
    out.push_back(o);
  }
  return out;
}

std::vector<SeqId> Scheduler::clear() {
  std::vector<SeqId> ids(running_.begin(), running_.end());
  ids.insert(ids.end(), waiting_.begin(), waiting_.end());
  for (SeqId id : ids) kv_.free(id);
  if (proposer_) proposer_->clear();
  seqs_.clear();
  running_.clear();
  waiting_.clear();
  finished_.clear();
  kv_.drop_prefix_cache();
  return ids;
}

// Registers the sequence's computed full blocks in the prefix cache, unless some
// of them were never written (a warm-up's unwritten prefix).
void Scheduler::cache_computed(SeqId id, const Seq& s) {
  if (s.spec.unwritten_prefix > 0) return;
  kv_.cache_full_blocks(id, s.tokens, std::min(s.n_computed, static_cast<int>(s.tokens.size())));
}

}  // namespace inferd::engine
