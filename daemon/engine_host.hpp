// Puts the engine into the daemon: registers the OpenAI routes, builds the engine
// from the configuration at Loading (the model loads, the scheduler starts; its
// progress goes to the Loading state's activity and /metrics), publishes the served model,
// and keeps it alive for as long as the daemon runs.
#pragma once
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>

#include "engine/engine.hpp"
#include "health/signal.hpp"

namespace inferd::daemon {

class Daemon;
class HeadGroup;
class Gauge;
struct Config;

engine::EngineOptions engine_options(const Config& cfg);

class EngineHost {
 public:
  // Installs the load hook on the daemon; the engine exists once Loading is done.
  explicit EngineHost(Daemon& daemon);
  ~EngineHost();

  std::shared_ptr<engine::Engine> engine() const {
    std::lock_guard lk(engine_mu_);
    return engine_;
  }
  // With tensor_parallel_size > 1: the group's health ("group": a worker gone
  // or silent is critical) and each worker rank's own ("rank1", ...: the worst
  // of the monitors it reported); nothing for a single rank.
  std::vector<health::Signal> group_signals() const;
  // Around a warm-up run, with tensor_parallel_size > 1 (nothing for a single
  // rank): every worker counts the shape keys its steps touch afresh; then
  // each reports what it touched of what it can reach. The second returns why
  // the gate must stay closed ("rank 1: 3 of 120 reachable shape keys were not
  // touched: ..."), or nothing.
  void begin_rank_coverage();
  std::optional<std::string> rank_coverage_failure();

 private:
  void load(Daemon& d);
  // Set by the start-up thread, read by HTTP and supervisor threads. A mutex,
  // not std::atomic<std::shared_ptr>: g++ 12's load releases that atomic's lock
  // bit with relaxed order (bits/shared_ptr_atomic.h), which ThreadSanitizer
  // reports as a race with the next store (test_lifecycle.py under TSan).
  mutable std::mutex engine_mu_;
  std::shared_ptr<engine::Engine> engine_;
  std::unique_ptr<HeadGroup> group_;  // with tensor_parallel_size > 1: the workers and the data plane
  std::atomic<HeadGroup*> group_ptr_{nullptr};  // the same, for the supervisor's and control plane's threads
  Gauge* load_progress_;
  Gauge* load_bytes_;
  Gauge* weights_bytes_;
  Gauge* load_seconds_;
};

}  // namespace inferd::daemon
