#include "engine/executor.hpp"

#include <algorithm>
#include <optional>

#include "engine/shape_space.hpp"

namespace inferd::engine {

std::vector<int> graph_sizes_for(const kernels::Backend& backend, const std::vector<int>& wanted, int max_num_seqs,
                                 int max_num_batched_tokens) {
  std::vector<int> out;
  if (!backend.can_capture()) return out;
  // A padded step is as wide as its size: never wider than a step may be.
  const int widest = std::min(max_num_seqs, max_num_batched_tokens);
  for (int s : wanted)
    if (s >= 1 && s <= widest) out.push_back(s);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

Executor::Executor(Model& model, KvCache& kv, kernels::Backend& backend, std::vector<int> graph_sizes)
    : model_(model), kv_(kv), backend_(backend), graph_sizes_(std::move(graph_sizes)) {
  std::sort(graph_sizes_.begin(), graph_sizes_.end());
}

int Executor::graph_size(int64_t n) const {
  const auto it = std::lower_bound(graph_sizes_.begin(), graph_sizes_.end(), n);
  return it == graph_sizes_.end() ? 0 : *it;
}

void Executor::execute(const StepPlan& plan, std::vector<float>& logits, std::vector<float>* features) {
  batch_.clear();
  run(plan, logits, nullptr, features);
}

void Executor::execute(const StepPlan& plan, std::span<const kernels::RowSampling> sampling, bool logits_too,
                       std::vector<float>& logits, std::vector<int32_t>& tokens) {
  batch_.clear();
  batch_.sampling.assign(sampling.begin(), sampling.end());
  batch_.logits_too = logits_too;
  run(plan, logits, &tokens, nullptr);
}

void Executor::run(const StepPlan& plan, std::vector<float>& logits, std::vector<int32_t>* tokens,
                   std::vector<float>* features) {
  for (const auto& s : plan.seqs) {
    const int32_t table = batch_.add_table(s.block_table);
    const int n = static_cast<int>(s.tokens.size());
    // Logits for the last token, and for each draft after it (their verification).
    const int first_row = n - 1 - s.num_drafts;
    for (int i = 0; i < n; ++i) batch_.add(s.tokens[i], s.start + i, table, s.sample && i >= first_row, s.seq);
  }
  const auto vocab = static_cast<size_t>(model_.config().vocab);
  const auto n = static_cast<int64_t>(plan.seqs.size());
  std::optional<kernels::LaunchScope> decode_step;
  const int size = plan.decode_only() ? graph_size(n) : 0;
  if (plan.decode_only()) decode_step.emplace(decode_batch_key(n));
  auto forward = [&] {
    const size_t rows = batch_.logits_rows.size();
    if (tokens) tokens->resize(rows);
    if (!tokens || batch_.logits_too) logits.resize(rows * vocab);
    if (features) features->resize(rows * static_cast<size_t>(model_.config().dim));
    model_.forward(batch_, kv_, logits.data(), tokens ? tokens->data() : nullptr, features ? features->data() : nullptr);
  };
  if (size == 0) return forward();
  // Every row samples here: the padding's rows come last (greedy where the
  // device samples), so the real rows' results are the first n.
  for (int64_t i = n; i < size; ++i) {
    batch_.add(batch_.tokens.back(), batch_.positions.back(), batch_.table_of.back(), true, batch_.seqs.back());
    if (tokens) batch_.sampling.push_back({});
  }
  backend_.run_captured(size, forward);
  if (tokens) tokens->resize(static_cast<size_t>(n));
  if (!tokens || batch_.logits_too) logits.resize(static_cast<size_t>(n) * vocab);
  if (features) features->resize(static_cast<size_t>(n) * static_cast<size_t>(model_.config().dim));
}

}  // namespace inferd::engine
