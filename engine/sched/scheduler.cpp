#include "engine/sched/scheduler.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace inferd::engine {

Scheduler::Scheduler(SchedulerLimits limits, KvCacheManager& kv) : limits_(limits), kv_(kv) {}

void Scheduler::add(SeqSpec spec) {
  if (spec.prompt.empty()) throw std::invalid_argument("scheduler: empty prompt");
  if (seqs_.count(spec.id)) throw std::invalid_argument("scheduler: sequence " + std::to_string(spec.id) + " exists");
  const SeqId id = spec.id;
  Seq s;
  s.tokens = spec.prompt;
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
  finished_.push_back(seq);
  return true;
}

Scheduler::SeqView Scheduler::view(SeqId seq) const {
  const Seq& s = seqs_.at(seq);
  const bool running = std::find(running_.begin(), running_.end(), seq) != running_.end();
  return {s.tokens, static_cast<int>(s.spec.prompt.size()), s.n_computed, s.cached_tokens, running};
}

void Scheduler::put(StepPlan& plan, Seq& s, int n) {
  ScheduledSeq ss;
  ss.seq = s.spec.id;
  ss.start = s.n_computed;
  ss.tokens.assign(s.tokens.begin() + s.n_computed, s.tokens.begin() + s.n_computed + n);
  ss.block_table = kv_.block_table(ss.seq);
  ss.sample = s.n_computed + n == static_cast<int>(s.tokens.size());
  plan.seqs.push_back(std::move(ss));
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
  for (int pass = 0; pass < 2; ++pass) {
    for (SeqId id : order) {
      if (budget <= 0) break;
      if (std::find(running_.begin(), running_.end(), id) == running_.end()) continue;  // preempted meanwhile
      Seq& s = seqs_.at(id);
      const bool decode = s.pending() == 1;
      if ((pass == 0) != decode) continue;
      const int n = std::min(s.pending(), budget);
      if (make_room(id, s.n_computed + n, plan)) {
        put(plan, s, n);
        budget -= n;
      }
    }
  }

  // Admit waiting sequences, oldest (and preempted) first, while there is room.
  while (!waiting_.empty() && budget > 0 && static_cast<int>(running_.size()) < limits_.max_num_seqs) {
    const SeqId id = waiting_.front();
    Seq& s = seqs_.at(id);
    const int hit = s.n_computed == 0 ? kv_.computed_blocks(id, s.tokens) : 0;
    s.n_computed += hit;
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
  return plan;
}

std::vector<TokenOutcome> Scheduler::update(const StepPlan& plan, std::span<const SampledToken> sampled) {
  ++counters_.steps;
  for (const auto& ss : plan.seqs) {
    auto it = seqs_.find(ss.seq);
    if (it == seqs_.end()) continue;  // ended while the step ran
    Seq& s = it->second;
    s.n_computed += static_cast<int>(ss.tokens.size());
    kv_.cache_full_blocks(ss.seq, s.tokens, s.n_computed);
  }
  std::vector<TokenOutcome> out;
  out.reserve(sampled.size());
  for (const auto& t : sampled) {
    auto it = seqs_.find(t.seq);
    if (it == seqs_.end()) continue;
    Seq& s = it->second;
    s.tokens.push_back(t.token);
    TokenOutcome o{t.seq, t.token, FinishReason::None};
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
  seqs_.clear();
  running_.clear();
  waiting_.clear();
  finished_.clear();
  kv_.drop_prefix_cache();
  return ids;
}

}  // namespace inferd::engine
