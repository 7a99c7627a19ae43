#include "daemon/engine_metrics.hpp"

#include <utility>
#include <vector>

#include "daemon/metrics.hpp"

namespace inferd::daemon {

namespace {

// vLLM's buckets, so histograms from either server line up.
const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
                                          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kItlBuckets = {0.01, 0.025, 0.05, 0.075, 0.1,  0.15, 0.2,  0.3,  0.4, 0.5,
                                         0.75, 1.0,   2.5,  5.0,   7.5,  10.0, 20.0, 40.0, 80.0};
const std::vector<double> kE2eBuckets = {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,    10.0,   15.0,  20.0,
                                         30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

const char* finished_reason_label(engine::FinishReason r) {
  switch (r) {
    case engine::FinishReason::Stop: return "stop";
    case engine::FinishReason::Length: return "length";
    case engine::FinishReason::Cancelled: return "abort";
    case engine::FinishReason::Error: return "error";
    case engine::FinishReason::None: break;
  }
  return "none";
}

}  // namespace

EngineMetrics::EngineMetrics(Metrics& metrics, std::string model_name, StatsSource stats)
    : metrics_(metrics),
      model_name_(std::move(model_name)),
      ttft_(metrics.histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                              {{"model_name", model_name_}}, kTtftBuckets)),
      itl_(metrics.histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                             {{"model_name", model_name_}}, kItlBuckets)),
      e2e_(metrics.histogram("vllm:e2e_request_latency_seconds", "Histogram of end-to-end request latency in seconds.",
                             {{"model_name", model_name_}}, kE2eBuckets)) {
  // One scrape-time series per engine number; each reads a fresh stats() snapshot.
  auto series = [&](const char* name, const char* help, MetricType type, double (*read)(const engine::EngineStats&)) {
    metrics.add_collector(name, help, type, [stats, read, label = model_name_] {
      std::vector<Metrics::Sample> out;
      if (auto s = stats()) out.push_back({{{"model_name", label}}, read(*s)});
      return out;
    });
  };
  using S = engine::EngineStats;
  series("vllm:num_requests_running", "Number of requests in model execution batches.", MetricType::Gauge,
         [](const S& s) { return double(s.running); });
  series("vllm:num_requests_waiting", "Number of requests waiting to be processed.", MetricType::Gauge,
         [](const S& s) { return double(s.waiting); });
  series("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", MetricType::Gauge,
         [](const S& s) { return s.kv_usage(); });
  series("vllm:prompt_tokens_total", "Number of prefill tokens processed.", MetricType::Counter,
         [](const S& s) { return double(s.prompt_tokens_total); });
  series("vllm:generation_tokens_total", "Number of generation tokens processed.", MetricType::Counter,
         [](const S& s) { return double(s.generation_tokens_total); });
  series("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.",
         MetricType::Counter, [](const S& s) { return double(s.prefix_queries_tokens); });
  series("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.",
         MetricType::Counter, [](const S& s) { return double(s.prefix_hits_tokens); });
  series("vllm:num_preemptions_total", "Cumulative number of preemptions from the engine.", MetricType::Counter,
         [](const S& s) { return double(s.preemptions_total); });
  // Speculative decoding: present only when it is configured (as in vLLM).
  auto spec_series = [&](const char* name, const char* help, double (*read)(const engine::EngineStats&)) {
    metrics.add_collector(name, help, MetricType::Counter, [stats, read, label = model_name_] {
      std::vector<Metrics::Sample> out;
      if (auto s = stats(); s && !s->spec_accepted_per_pos.empty()) out.push_back({{{"model_name", label}}, read(*s)});
      return out;
    });
  };
  spec_series("vllm:spec_decode_num_drafts_total", "Number of spec decoding drafts.",
              [](const S& s) { return double(s.spec_drafts); });
  spec_series("vllm:spec_decode_num_draft_tokens_total", "Number of draft tokens.",
              [](const S& s) { return double(s.spec_draft_tokens); });
  spec_series("vllm:spec_decode_num_accepted_tokens_total", "Number of accepted tokens.",
              [](const S& s) { return double(s.spec_accepted_tokens); });
  metrics.add_collector("vllm:spec_decode_num_accepted_tokens_per_pos_total", "Accepted tokens per draft position.",
                        MetricType::Counter, [stats, label = model_name_] {
                          std::vector<Metrics::Sample> out;
                          if (auto s = stats())
                            for (size_t i = 0; i < s->spec_accepted_per_pos.size(); ++i)
                              out.push_back({{{"model_name", label}, {"position", std::to_string(i)}},
                                             double(s->spec_accepted_per_pos[i])});
                          return out;
                        });
}

void EngineMetrics::observe_ttft(double seconds) { ttft_.observe(seconds); }

void EngineMetrics::observe_inter_token(double seconds) { itl_.observe(seconds); }

void EngineMetrics::request_finished(engine::FinishReason reason, double e2e_seconds) {
  e2e_.observe(e2e_seconds);
  metrics_
      .counter("vllm:request_success_total", "Count of finished requests by finish reason.",
               {{"model_name", model_name_}, {"finished_reason", finished_reason_label(reason)}})
      .inc();
}

}  // namespace inferd::daemon
