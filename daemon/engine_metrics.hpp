// The engine's numbers under vLLM's metric names and labels, so dashboards and
// `vllm bench serve` built for vLLM read inferd unchanged:
//   scrape time  vllm:num_requests_running, vllm:num_requests_waiting,
//                vllm:kv_cache_usage_perc (a fraction, 1 = full, as vLLM),
//                vllm:prompt_tokens_total, vllm:generation_tokens_total,
//                vllm:prefix_cache_queries_total, vllm:prefix_cache_hits_total (tokens),
//                vllm:num_preemptions_total,
//                with speculative decoding vllm:spec_decode_num_drafts_total,
//                vllm:spec_decode_num_draft_tokens_total, vllm:spec_decode_num_accepted_tokens_total,
//                vllm:spec_decode_num_accepted_tokens_per_pos_total{position}
//   per request  vllm:time_to_first_token_seconds, vllm:inter_token_latency_seconds,
//                vllm:e2e_request_latency_seconds, vllm:request_success_total{finished_reason}
// Every series carries model_name.
#pragma once
#include <functional>
#include <optional>
#include <string>

#include "engine/engine.hpp"

namespace inferd::daemon {

class Counter;
class Histogram;
class Metrics;

class EngineMetrics {
 public:
  // The engine's current counters, or nullopt while no engine is loaded (its
  // series are then absent from the scrape).
  using StatsSource = std::function<std::optional<engine::EngineStats>()>;

  // Registers every series in `metrics`, which must outlive this object. Once per registry.
  EngineMetrics(Metrics& metrics, std::string model_name, StatsSource stats);

  // Thread-safe; called from the engine's scheduler thread as deltas arrive.
  void observe_ttft(double seconds);
  void observe_inter_token(double seconds);
  // A request (one choice) ended: its end-to-end latency and why it ended.
  void request_finished(engine::FinishReason reason, double e2e_seconds);

 private:
  Metrics& metrics_;
  std::string model_name_;
  Histogram& ttft_;
  Histogram& itl_;
  Histogram& e2e_;
};

}  // namespace inferd::daemon
