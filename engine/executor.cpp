#include "engine/executor.hpp"

#include <optional>

#include "engine/shape_space.hpp"

namespace inferd::engine {
void Executor::execute(const StepPlan& plan, std::vector<float>& logits) {
  batch_.clear();
  for (const auto& s : plan.seqs) {
    const int32_t table = batch_.add_table(s.block_table);
    const int n = static_cast<int>(s.tokens.size());
    for (int i = 0; i < n; ++i) batch_.add(s.tokens[i], s.start + i, table, s.sample && i + 1 == n);
  }
  logits.resize(batch_.logits_rows.size() * static_cast<size_t>(model_.config().vocab));
  // A step that only decodes is what a captured decode graph would replay.
  std::optional<kernels::LaunchScope> decode_step;
  if (plan.decode_only()) decode_step.emplace(decode_batch_key(static_cast<int64_t>(plan.seqs.size())));
  model_.forward(batch_, kv_, logits.data());
}

}  // namespace inferd::engine
