// Puts the warm-up into the daemon: at Warming it derives the plan from the
// engine's shape space, runs it (retrying as [warmup] says), and opens the gate
// only when it passed; then it seals the shape-key registry, so any later first
// use of a key is a cold shape (warning + inferd_cold_shapes_total).
// It also serves the operator's re-run:
//   GET  /admin/warmup   the plan, the reachable keys and the last run's report
//   POST /admin/warmup   closes the endpoint (Recovering -> Warming), re-runs the
//                        full warm-up and reopens; 202 at once, 409 if not Serving
#pragma once
#include <atomic>
#include <mutex>
#include <string>
#include <thread>

#include "warmup/runner.hpp"

namespace inferd::daemon {

class Daemon;
class EngineHost;
class Counter;

class WarmupHost {
 public:
  // Installs the daemon's warm hook and the /admin/warmup routes.
  WarmupHost(Daemon& daemon, EngineHost& engines);
  ~WarmupHost();

  // Runs the warm-up until it passes or its retries are spent (then throws).
  // Called on the start-up thread and by the operator's re-run ([warmup] depth,
  // full by default) and by a recovery (least: see warmup::Depth). A retry
  // always runs the full plan.
  void warm(Daemon& d, warmup::Depth depth);

 private:
  void rewarm(Daemon& d);
  void publish(const warmup::Report& report);
  std::string report_json() const;

  Daemon& daemon_;
  EngineHost& engines_;
  Counter* cold_ = nullptr;
  mutable std::mutex mu_;
  std::string plan_text_;
  std::vector<std::string> unreached_;
  warmup::Report last_;
  bool have_report_ = false;
  std::atomic<bool> rerunning_{false};
  std::thread rerun_;
};

}  // namespace inferd::daemon
