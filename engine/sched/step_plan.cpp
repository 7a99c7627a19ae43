#include "engine/sched/step_plan.hpp"

#include <algorithm>

namespace inferd::engine {

const char* to_string(FinishReason r) {
  switch (r) {
    case FinishReason::None: return "none";
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Cancelled: return "cancelled";
    case FinishReason::Error: return "error";
  }
  return "?";
}

int StepPlan::num_tokens() const {
  int n = 0;
  for (const auto& s : seqs) n += static_cast<int>(s.tokens.size());
  return n;
}

int StepPlan::num_logits_rows() const {
  int n = 0;
  for (const auto& s : seqs) n += s.logits_rows();
  return n;
}

uint64_t StepPlan::work() const {
  uint64_t w = 0;
  for (const auto& s : seqs) w += s.tokens.size() * (static_cast<uint64_t>(s.start) + s.tokens.size());
  return w;
}

bool StepPlan::decode_only() const {
  return !seqs.empty() &&
         std::all_of(seqs.begin(), seqs.end(), [](const auto& s) { return s.sample && s.tokens.size() == 1; });
}

}  // namespace inferd::engine
