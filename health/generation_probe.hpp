// The generation probe: a short greedy generation through the engine's real path
// (scheduler, kernels, sampling, detokenization), compared token for token with
// the golden taken right after warm-up. A wrong answer or one over the latency
// budget is a Critical signal: the engine answers, but not correctly.
#pragma once
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "health/signal.hpp"

namespace inferd::engine {
class Engine;
}

namespace inferd::health {

struct ProbeOptions {
  // Shorter than a KV block, so the prefix cache never answers for the model.
  std::string prompt = "The capital of France is";
  int max_tokens = 12;
  std::chrono::milliseconds budget{10000};  // the least time an answer may take
};

struct ProbeResult {
  bool ran = false;
  bool ok = false;
  std::string text;
  std::vector<int32_t> tokens;
  double seconds = 0;
  std::string reason;  // why it failed
  Level level = Level::Ok;  // a wrong answer is Critical; a late one sheds (it may only be load)
  std::chrono::system_clock::time_point at;
};

class GenerationProbe {
 public:
  explicit GenerationProbe(ProbeOptions options = {}) : opts_(std::move(options)) {}

  // Runs one generation and takes its tokens as the golden (after warm-up).
  ProbeResult capture_golden(engine::Engine& engine);
  // Runs one generation and compares it with the golden. Blocks up to `budget`
  // (at least the configured one): callers scale it with the engine's step time.
  ProbeResult run(engine::Engine& engine, std::chrono::milliseconds budget = {});
  int max_tokens() const { return opts_.max_tokens; }
  ProbeResult last() const;
  bool has_golden() const;
  Signal signal() const;  // from the last result

 private:
  ProbeResult generate(engine::Engine& engine, std::chrono::milliseconds budget) const;
  ProbeOptions opts_;
  mutable std::mutex mu_;
  std::optional<std::vector<int32_t>> golden_;
  std::string golden_text_;
  ProbeResult last_;
};

}  // namespace inferd::health
