// Deciding: samples the health monitors, each at its own cadence ([health]
// *_interval_ms), runs the generation probe on its own thread, and hands the
// signals to the recovery policy. Baselines (MemAvailable, RSS, error-line
// counts, the probe's golden answer) are taken when the warm-up gate first opens.
// A kernel PSI trigger, where there is one, asks for a sample at once.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "daemon/monitor_settings.hpp"
#include "fabric/port_monitor.hpp"
#include "health/stderr_pipe.hpp"

namespace inferd::daemon {

class Daemon;
class EngineHost;

// One tick's readings as values: every monitor's signal, and the observations
// /metrics shows.
struct MonitorSample {
  std::vector<health::Signal> signals;
  health::PsiObservation psi;
  health::MeminfoObservation mem;
  health::ProcessObservation proc;
  fabric::PortObservation fabric;
  health::GpuObservation gpu;
};

struct MonitorSampleCount {
  std::string monitor;
  uint64_t samples = 0;
};

// The policy's recovery budget now.
struct RecoveryBudget {
  int recoveries_in_window = 0;
  int max_recoveries = 0;
  std::chrono::seconds window{0};
};

class HealthSampler {
 public:
  // `on_pressure` is called from the PSI trigger's thread when memory pressure
  // rises. Throws when MemAvailable is below [health] min_available_bytes.
  // Without `engines` (a worker rank: the head runs the group's probe) there is
  // no generation probe and no group signal.
  HealthSampler(Daemon& daemon, EngineHost* engines, std::function<void()> on_pressure);
  ~HealthSampler();
  HealthSampler(const HealthSampler&) = delete;
  HealthSampler& operator=(const HealthSampler&) = delete;

  // Puts the original stderr back after passing on what the pipe still held.
  // For an exit that skips destructors; once the supervisor loop has stopped.
  void restore_stderr() { pipe_.reset(); }

  std::chrono::milliseconds tick_every() const { return every_.tick; }
  // From the supervisor loop. `pressure_now`: pressure and memory are read
  // whatever their cadence.
  MonitorSample sample(bool pressure_now);
  health::Decision decide(const std::vector<health::Signal>& signals);
  RecoveryBudget budget();

  // After a recovery's warm-up: error lines count from here, and no
  // observation from before the recovery is reused.
  void rebaseline();
  // Asks the probe thread for a probe at once.
  void probe_soon();
  // Runs a probe now (the golden's capture if there is none yet); nullopt before
  // the warm-up gate first opened.
  std::optional<health::ProbeResult> probe_now();
  health::ProbeResult last_probe() const { return probe_.last(); }

  std::vector<MonitorSampleCount> sample_counts() const;
  std::vector<health::LogCount> log_counts() const { return scanner_.counts(); }
  std::map<std::pair<int, uint64_t>, uint64_t> gpu_xid_counts() const { return gpu_.xid_counts(); }

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

  HealthSampler(Daemon& daemon, EngineHost* engines, std::function<void()> on_pressure, const MonitorSettings& s);
  void take_baselines();
  void probe_loop();
  void wait_for_pressure(std::function<void()> on_pressure);
  std::chrono::milliseconds probe_budget() const;

  Daemon& daemon_;
  EngineHost* engines_;
  const MonitorIntervals every_;

  health::LogScanner scanner_;
  std::unique_ptr<health::StderrPipe> pipe_;
  health::PsiMonitor psi_;
  health::MeminfoMonitor meminfo_;
  health::ProcessMonitor process_;
  health::StepDeadlineMonitor step_deadline_;
  health::GenerationProbe probe_;
  fabric::PortMonitor fabric_;
  health::GpuMonitor gpu_;
  std::mutex policy_mu_;  // the status report reads the budget from HTTP threads
  health::Policy policy_;

  Cadenced<health::PsiObservation> psi_obs_;
  Cadenced<health::MeminfoObservation> mem_obs_;
  Cadenced<health::ProcessObservation> proc_obs_;
  Cadenced<health::LogObservation> log_obs_;
  Cadenced<health::StepObservation> step_obs_;
  Cadenced<fabric::PortObservation> fabric_obs_;
  Cadenced<health::GpuObservation> gpu_obs_;
  uint64_t steps_seen_ = 0;

  std::atomic<bool> resample_all_{false};
  std::atomic<bool> baselined_{false};
  std::atomic<bool> probe_failed_{false};

  std::mutex probe_mu_;
  std::condition_variable probe_cv_;
  bool probe_soon_ = false;
  bool quitting_ = false;
  std::thread prober_;
  std::unique_ptr<health::PsiTrigger> psi_trigger_;
  std::thread psi_waiter_;
};

}  // namespace inferd::daemon
