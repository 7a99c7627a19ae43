// The supervisor: samples the health monitors on the daemon's supervisor loop,
// hands their signals to the recovery policy and carries out its decisions:
//   shed     Serving -> Degraded (new work 503 + Retry-After) until calm again
//   recover  -> Recovering: reset the engine (abort the step, drop the KV and
//            prefix cache, hold requests that produced nothing, end the others
//            with a visible error), -> Warming: the full warm-up, -> Serving:
//            the held requests run
//   fail     -> Failed, exit 1, so systemd starts us afresh
// Monitors sample in every state, each at its own interval ([health]
// *_interval_ms); decisions act only while Serving or Degraded.
// Baselines (MemAvailable, RSS, error-line counts, the probe's golden answer) are
// taken when the warm-up gate first opens.
//   GET  /health/generate (alias /health_generate)  the last probe
//   POST /admin/probe                                 runs one now and answers it
//   GET  /admin/supervisor                            monitors now, recovery budget,
//                                                     the last decisions and their outcome
// Each decision is also a log record with fields (action, level, monitors, decision).
#pragma once
#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <boost/asio/steady_timer.hpp>

#include "health/generation_probe.hpp"
#include "health/log_scanner.hpp"
#include "health/meminfo_monitor.hpp"
#include "health/policy.hpp"
#include "health/process_monitor.hpp"
#include "health/psi_monitor.hpp"
#include "health/stderr_pipe.hpp"
#include "health/step_watchdog.hpp"

namespace inferd::daemon {

class Daemon;
class EngineHost;
class WarmupHost;
class Gauge;
class Counter;
enum class State;

class Supervisor {
 public:
  // Refuses to start (throws) when MemAvailable is below [health] min_available_bytes.
  Supervisor(Daemon& daemon, EngineHost& engines, WarmupHost& warmup);
  ~Supervisor();

 private:
  // A monitor's own cadence: sampled when due (or when forced), its last
  // observation reused in between.
  template <class Observation>
  struct Cadenced {
    std::chrono::milliseconds every;
    std::chrono::steady_clock::time_point next{};
    Observation last{};
    std::atomic<uint64_t> samples{0};  // inferd_monitor_samples_total
    template <class Sample>
    const Observation& get(std::chrono::steady_clock::time_point now, bool force, Sample sample) {
      if (force || now >= next) {
        last = sample();
        next = now + every;
        samples.fetch_add(1, std::memory_order_relaxed);
      }
      return last;
    }
  };

  void tick();
  // `pressure_now`: the kernel PSI trigger fired, so pressure and memory are read at once.
  void sample_and_act(bool pressure_now = false);
  void act(const health::Decision& d);
  void recover(std::string reason, uint64_t decision);
  void set_outcome(uint64_t decision, std::string outcome);
  std::string report_json();
  void on_first_serving();
  void probe_loop();
  std::chrono::milliseconds probe_budget() const;
  std::string probe_json(const health::ProbeResult& r) const;

  Daemon& daemon_;
  EngineHost& engines_;
  WarmupHost& warmup_;
  const bool enabled_;
  boost::asio::steady_timer timer_;

  health::LogScanner scanner_;
  std::unique_ptr<health::StderrPipe> pipe_;
  health::PsiMonitor psi_;
  health::MeminfoMonitor meminfo_;
  health::ProcessMonitor process_;
  std::unique_ptr<health::StepWatchdog> watchdog_;
  health::GenerationProbe probe_;
  health::Policy policy_;  // guarded by report_mu_: the report reads its budget
  std::chrono::milliseconds tick_every_;
  Cadenced<health::PsiObservation> psi_obs_;
  Cadenced<health::MeminfoObservation> mem_obs_;
  Cadenced<health::ProcessObservation> proc_obs_;
  Cadenced<health::LogObservation> log_obs_;
  Cadenced<health::StepObservation> step_obs_;
  uint64_t steps_seen_ = 0;
  std::string last_levels_;  // to log only changes of the monitors' levels

  Gauge* level_ = nullptr;       // worst level now (0 ok .. 3 critical)
  Counter* recoveries_ = nullptr;
  Counter* sheds_ = nullptr;
  Gauge* mttr_ = nullptr;

  // What GET /admin/supervisor reports.
  struct DecisionRecord {
    uint64_t id = 0;
    std::chrono::system_clock::time_point at;
    health::Decision decision;
    std::string outcome;  // what came of it: the state entered, the recovery's time or failure
  };
  static constexpr size_t kDecisionsKept = 64;
  std::mutex report_mu_;
  std::vector<health::Signal> last_signals_;
  std::deque<DecisionRecord> decisions_;
  uint64_t next_decision_ = 1;

  std::atomic<bool> resample_all_{false};  // after a recovery: no observation from before it is reused
  std::atomic<bool> baselined_{false};
  std::atomic<bool> recovering_{false};
  std::atomic<bool> probe_failed_{false};
  std::thread recovery_;

  std::mutex probe_mu_;
  std::condition_variable probe_cv_;
  bool probe_now_ = false;
  bool quitting_ = false;
  std::thread prober_;
  // Kernel PSI trigger: wakes a sample at once instead of at the next tick.
  std::unique_ptr<health::PsiTrigger> psi_trigger_;
  std::thread psi_waiter_;
};

}  // namespace inferd::daemon
