#include <doctest/doctest.h>

#include <optional>
#include <string>

#include "daemon/engine_metrics.hpp"
#include "daemon/metrics.hpp"

using inferd::daemon::EngineMetrics;
using inferd::daemon::Metrics;
using inferd::engine::EngineStats;
using inferd::engine::FinishReason;

namespace {

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos || text.starts_with(line + "\n");
}

}  // namespace

TEST_CASE("engine metrics: vLLM names, model_name label, scrape-time values") {
  Metrics metrics;
  std::optional<EngineStats> stats;
  EngineMetrics em(metrics, "smol", [&] { return stats; });

  // No engine yet: the families exist but carry no samples.
  std::string text = metrics.render();
  CHECK(text.find("# TYPE vllm:num_requests_running gauge") != std::string::npos);
  CHECK(text.find("vllm:num_requests_running{") == std::string::npos);

  stats = EngineStats{};
  stats->running = 3;
  stats->waiting = 2;
  stats->kv_blocks_total = 8;
  stats->kv_blocks_used = 2;
  stats->prompt_tokens_total = 100;
  stats->generation_tokens_total = 40;
  stats->prefix_queries_tokens = 64;
  stats->prefix_hits_tokens = 32;
  stats->preemptions_total = 1;
  text = metrics.render();
  CHECK(has_line(text, R"(vllm:num_requests_running{model_name="smol"} 3)"));
  CHECK(has_line(text, R"(vllm:num_requests_waiting{model_name="smol"} 2)"));
  CHECK(has_line(text, R"(vllm:kv_cache_usage_perc{model_name="smol"} 0.25)"));
  CHECK(has_line(text, R"(vllm:prompt_tokens_total{model_name="smol"} 100)"));
  CHECK(has_line(text, R"(vllm:generation_tokens_total{model_name="smol"} 40)"));
  CHECK(has_line(text, R"(vllm:prefix_cache_queries_total{model_name="smol"} 64)"));
  CHECK(has_line(text, R"(vllm:prefix_cache_hits_total{model_name="smol"} 32)"));
  CHECK(has_line(text, R"(vllm:num_preemptions_total{model_name="smol"} 1)"));
  CHECK(text.find("# TYPE vllm:prompt_tokens_total counter") != std::string::npos);

  em.observe_ttft(0.03);
  em.observe_inter_token(0.02);
  em.observe_inter_token(0.02);
  em.request_finished(FinishReason::Length, 1.2);
  em.request_finished(FinishReason::Cancelled, 0.1);
  text = metrics.render();
  CHECK(has_line(text, R"(vllm:time_to_first_token_seconds_count{model_name="smol"} 1)"));
  CHECK(has_line(text, R"(vllm:time_to_first_token_seconds_bucket{model_name="smol",le="0.04"} 1)"));
  CHECK(has_line(text, R"(vllm:time_to_first_token_seconds_bucket{model_name="smol",le="0.02"} 0)"));
  CHECK(has_line(text, R"(vllm:inter_token_latency_seconds_count{model_name="smol"} 2)"));
  CHECK(has_line(text, R"(vllm:e2e_request_latency_seconds_count{model_name="smol"} 2)"));
  CHECK(has_line(text, R"(vllm:request_success_total{model_name="smol",finished_reason="length"} 1)"));
  CHECK(has_line(text, R"(vllm:request_success_total{model_name="smol",finished_reason="abort"} 1)"));
}

TEST_CASE("engine metrics: speculative decoding counters under vLLM's names, only when it is configured") {
  Metrics metrics;
  std::optional<EngineStats> stats = EngineStats{};
  EngineMetrics em(metrics, "smol", [&] { return stats; });
  std::string text = metrics.render();
  CHECK(text.find("vllm:spec_decode_num_drafts_total{") == std::string::npos);
  CHECK(text.find("vllm:spec_decode_num_accepted_tokens_per_pos_total{") == std::string::npos);

  stats->spec_drafts = 10;
  stats->spec_draft_tokens = 30;
  stats->spec_accepted_tokens = 12;
  stats->spec_accepted_per_pos = {7, 4, 1};
  text = metrics.render();
  CHECK(has_line(text, R"(vllm:spec_decode_num_drafts_total{model_name="smol"} 10)"));
  CHECK(has_line(text, R"(vllm:spec_decode_num_draft_tokens_total{model_name="smol"} 30)"));
  CHECK(has_line(text, R"(vllm:spec_decode_num_accepted_tokens_total{model_name="smol"} 12)"));
  CHECK(has_line(text, R"(vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="smol",position="0"} 7)"));
  CHECK(has_line(text, R"(vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="smol",position="2"} 1)"));
  CHECK(text.find("# TYPE vllm:spec_decode_num_drafts_total counter") != std::string::npos);
}
