// Acting: carries out the recovery policy's decisions.
//   shed     Serving -> Degraded (new work 503 + Retry-After) until calm again
//   recover  -> Recovering: reset the engine (abort the step, drop the KV and
//            prefix cache, hold requests that produced nothing, end the others
//            with a visible error), -> Warming: the full warm-up, -> Serving:
//            the held requests run. On its own thread: the supervisor loop
//            keeps sampling (and systemd hears WATCHDOG=1) meanwhile.
//   fail     -> Failed, exit 1, so systemd starts us afresh
// Each decision is a log record with fields (decision, action, level, monitors)
// and is kept, with what came of it, for GET /admin/supervisor.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "health/policy.hpp"

namespace inferd::daemon {

class Daemon;
class EngineHost;
class WarmupHost;
class Counter;
class Gauge;

struct DecisionRecord {
  uint64_t id = 0;
  std::chrono::system_clock::time_point at;
  health::Decision decision;
  std::string outcome;  // what came of it: the state entered, the recovery's time or failure
};

class SupervisorActions {
 public:
  // What a recovery tells the deciding side: `warmed` after its warm-up (before
  // held requests run), `reopened` once Serving again.
  struct RecoveryHooks {
    std::function<void()> warmed;
    std::function<void()> reopened;
  };

  SupervisorActions(Daemon& daemon, EngineHost& engines, WarmupHost& warmup, RecoveryHooks hooks);
  // Waits for a recovery in progress.
  ~SupervisorActions();
  SupervisorActions(const SupervisorActions&) = delete;
  SupervisorActions& operator=(const SupervisorActions&) = delete;

  // From the supervisor loop.
  void act(const health::Decision& d);
  bool recovering() const { return recovering_; }
  // The latest decisions, oldest first.
  std::vector<DecisionRecord> decisions() const;

 private:
  void recover(std::string reason, uint64_t decision);
  void set_outcome(uint64_t decision, std::string outcome);

  Daemon& daemon_;
  EngineHost& engines_;
  WarmupHost& warmup_;
  RecoveryHooks hooks_;
  Counter* recoveries_ = nullptr;
  Counter* sheds_ = nullptr;
  Gauge* mttr_ = nullptr;

  static constexpr size_t kDecisionsKept = 64;
  mutable std::mutex mu_;
  std::deque<DecisionRecord> decisions_;
  uint64_t next_decision_ = 1;

  std::atomic<bool> recovering_{false};
  std::thread recovery_;
};

}  // namespace inferd::daemon
