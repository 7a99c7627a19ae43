#include "daemon/supervisor_sampling.hpp"

#include <unistd.h>

#include <spdlog/spdlog.h>

#include "daemon/daemon.hpp"
#include "daemon/engine_host.hpp"
#include "daemon/fabric_preflight.hpp"
#include "faults/fault_points.hpp"

namespace inferd::daemon {

namespace {

using namespace std::chrono;

health::Level cap(health::Level l, health::Level most) { return l < most ? l : most; }

// RDMA port state and error counters: a few sysfs files per port.
constexpr milliseconds kFabricEvery{1000};

health::Procfs procfs(const Daemon& d) { return health::Procfs(d.config().health.procfs_root); }

// The pre-flight's port: only its going down stops the group (the others warn).
// None with one node or without an RDMA choice: then every port counts.
fabric::ChosenPort chosen_port(const Config& cfg) {
  const cluster::FabricChoice c = fabric_identity(cfg);
  return {c.device, c.port};
}

}  // namespace

HealthSampler::HealthSampler(Daemon& daemon, EngineHost* engines, std::function<void()> on_pressure)
    : HealthSampler(daemon, engines, std::move(on_pressure), monitor_settings(daemon.config().health)) {}

HealthSampler::HealthSampler(Daemon& daemon, EngineHost* engines, std::function<void()> on_pressure,
                             const MonitorSettings& s)
    : daemon_(daemon),
      engines_(engines),
      every_(s.every),
      scanner_(s.scanner),
      psi_(s.psi, procfs(daemon)),
      meminfo_(s.meminfo, procfs(daemon)),
      process_(s.process, procfs(daemon)),
      step_deadline_(daemon.heartbeat(), s.step_deadline),
      probe_(s.probe),
      fabric_(daemon.config().fabric.sysfs_root,
              {daemon.config().fabric.link_downed_warn_per_s, daemon.config().fabric.errors_warn_per_s},
              chosen_port(daemon.config())),
      gpu_(gpu_monitor_options(daemon.config())),
      policy_(s.policy) {
  const HealthConfig& h = daemon.config().health;
  psi_obs_.every = every_.psi;
  mem_obs_.every = every_.meminfo;
  proc_obs_.every = every_.process;
  log_obs_.every = every_.log;
  step_obs_.every = every_.step_deadline;
  fabric_obs_.every = kFabricEvery;
  gpu_obs_.every = every_.gpu;
  if (h.min_available_bytes > 0) {
    const auto m = meminfo_.sample();
    if (m.available && m.mem_available < static_cast<uint64_t>(h.min_available_bytes))
      throw std::runtime_error(fmt::format("only {} MiB of memory available, below [health] min_available_bytes ({} MiB)",
                                           m.mem_available >> 20, h.min_available_bytes >> 20));
  }
  if (h.enable && h.capture_stderr)
    pipe_ = health::StderrPipe::install([this](std::string_view line) { scanner_.scan(line); });
  daemon.lifecycle().on_change([this](State, State to, std::string_view) {
    if (to == State::Serving && !baselined_.exchange(true)) take_baselines();
  });
  if (h.enable)
    daemon.set_step_deadline([this] { return step_deadline_.deadline(daemon_.heartbeat().step_work()); });
  if (engines_) prober_ = std::thread([this] { probe_loop(); });
  psi_trigger_ = std::make_unique<health::PsiTrigger>(health::PsiTriggerOptions{}, procfs(daemon));
  if (psi_trigger_->available()) {
    spdlog::info("supervisor: kernel PSI trigger '{}' on memory pressure", psi_trigger_->trigger());
    psi_waiter_ = std::thread([this, on_pressure = std::move(on_pressure)] { wait_for_pressure(on_pressure); });
  } else {
    spdlog::info("supervisor: no kernel PSI trigger ({}); sampling every {} ms", psi_trigger_->error(), h.interval_ms);
  }
}

HealthSampler::~HealthSampler() {
  {
    std::lock_guard lk(probe_mu_);
    quitting_ = true;
  }
  probe_cv_.notify_all();
  if (prober_.joinable()) prober_.join();
  if (psi_waiter_.joinable()) psi_waiter_.join();
  pipe_.reset();  // restores stderr after its last lines went through
}

void HealthSampler::wait_for_pressure(std::function<void()> on_pressure) {
  for (;;) {
    {
      std::lock_guard lk(probe_mu_);
      if (quitting_) return;
    }
    if (psi_trigger_->wait(milliseconds(200)) == health::PsiTrigger::Wait::Fired) on_pressure();
  }
}

// On the thread that made the transition to Serving, not the supervisor's: each
// of these may be called while the supervisor thread samples the same monitor.
void HealthSampler::take_baselines() {
  meminfo_.capture_baseline();
  process_.capture_baseline();
  // Not retaken after a recovery: a port that went down stays a signal.
  fabric_.capture_baseline();
  scanner_.mark_baseline();
  probe_soon();  // the first probe captures the golden
  spdlog::info("supervisor: baselines taken (memory, RSS, error lines); capturing the generation probe's golden answer");
}

void HealthSampler::rebaseline() {
  scanner_.mark_baseline();
  gpu_.rebaseline();  // the engine was reset: Xids and ECC errors count from here
  resample_all_ = true;
}

void HealthSampler::probe_soon() {
  {
    std::lock_guard lk(probe_mu_);
    probe_soon_ = true;
  }
  probe_cv_.notify_all();
}

void HealthSampler::probe_loop() {
  const double interval = daemon_.config().health.probe_interval_s;
  std::unique_lock lk(probe_mu_);
  for (;;) {
    auto ready = [&] { return quitting_ || probe_soon_; };
    // Without a golden yet (its first capture failed, e.g. in a recovery), retry soon.
    const bool want_golden = baselined_ && !probe_.has_golden();
    if (want_golden) probe_cv_.wait_for(lk, seconds(1), ready);
    else if (interval > 0) probe_cv_.wait_for(lk, duration<double>(interval), ready);
    else probe_cv_.wait(lk, ready);
    if (quitting_) return;
    probe_soon_ = false;
    const State s = daemon_.lifecycle().state();
    auto eng = engines_->engine();
    if (!eng || !baselined_ || (s != State::Serving && s != State::Degraded)) continue;
    lk.unlock();
    if (!probe_.has_golden()) {
      const auto r = probe_.capture_golden(*eng);
      if (r.ok) spdlog::info("supervisor: generation probe golden '{}' ({:.0f} ms)", r.text, r.seconds * 1e3);
      else spdlog::error("supervisor: could not capture the generation probe's golden: {}", r.reason);
    } else if (const auto r = probe_.run(*eng, probe_budget()); !r.ok) {
      probe_failed_ = true;
      spdlog::error("supervisor: generation probe failed: {}", r.reason);
    }
    lk.lock();
  }
}

std::optional<health::ProbeResult> HealthSampler::probe_now() {
  auto eng = engines_ ? engines_->engine() : nullptr;
  // A probe is a generation: while a recovery warms the engine it would share the
  // warm-up's steps and change the shapes that run must touch on its own.
  if (!eng || !baselined_ || !daemon_.lifecycle().admits_generation()) return std::nullopt;
  auto r = probe_.has_golden() ? probe_.run(*eng, probe_budget()) : probe_.capture_golden(*eng);
  if (!r.ok) probe_failed_ = true;
  return r;
}

// The probe may take as long as its tokens take at the engine's slowest recent
// steps: under load every step can carry a prefill chunk, so an answer is late
// without anything being wrong. (A p99 over every step understates that: a
// 10-minute soak with long prompts made one probe late at 3 x 14 x that p99.)
milliseconds HealthSampler::probe_budget() const {
  const double slowest_s = duration<double>(step_deadline_.slowest()).count();
  return milliseconds(static_cast<int64_t>(3e3 * (probe_.max_tokens() + 2) * slowest_s));
}

MonitorSample HealthSampler::sample(bool pressure_now) {
  // Fault point "log.inject=<line>": writes the line to our stderr once, as a
  // library (UCX, NCCL) would.
  static const faults::FaultPoint inject("log.inject");
  if (inject.armed()) {
    const std::string line = inject.value() + "\n";
    faults::disarm_fault("log.inject");
    [[maybe_unused]] auto n = ::write(STDERR_FILENO, line.data(), line.size());
  }

  using health::Level;
  const auto now = steady_clock::now();
  const bool all = resample_all_.exchange(false);
  MonitorSample out;
  out.psi = psi_obs_.get(now, all || pressure_now, [&] {
    auto o = psi_.sample();
    o.signal.level = cap(o.signal.level, Level::Shed);  // pressure sheds; a recovery frees nothing
    return o;
  });
  out.signals.push_back(out.psi.signal);
  out.mem = mem_obs_.get(now, all || pressure_now, [&] {
    auto o = meminfo_.sample();
    o.signal.level = cap(o.signal.level, Level::Shed);
    return o;
  });
  out.signals.push_back(out.mem.signal);
  out.proc = proc_obs_.get(now, all, [&] {
    auto o = process_.sample();
    o.signal.level = cap(o.signal.level, Level::Warn);
    return o;
  });
  out.signals.push_back(out.proc.signal);
  out.signals.push_back(log_obs_.get(now, all, [&] { return scanner_.sample(); }).signal);
  const auto& hb = daemon_.heartbeat();
  if (const uint64_t steps = hb.steps_completed(); steps != steps_seen_) {
    steps_seen_ = steps;
    step_deadline_.record_step(duration_cast<nanoseconds>(hb.last_step()), hb.last_work());
  }
  out.signals.push_back(step_obs_.get(now, all, [&] { return step_deadline_.sample(); }).signal);
  out.fabric = fabric_obs_.get(now, all, [&] {
    auto o = fabric_.sample();
    // A group on one node sends nothing over the fabric: its ports only warn.
    if (daemon_.config().parallel.nnodes == 1) o.signal.level = cap(o.signal.level, Level::Warn);
    return o;
  });
  if (!out.fabric.ports.empty()) out.signals.push_back(out.fabric.signal);
  out.gpu = gpu_obs_.get(now, all, [&] { return gpu_.sample(); });
  if (out.gpu.give_signal) out.signals.push_back(out.gpu.signal);
  if (engines_)
    for (auto& s : engines_->group_signals()) out.signals.push_back(std::move(s));
  if (probe_failed_.exchange(false)) out.signals.push_back(probe_.signal());
  return out;
}

health::Decision HealthSampler::decide(const std::vector<health::Signal>& signals) {
  std::lock_guard lk(policy_mu_);
  return policy_.decide(signals);
}

RecoveryBudget HealthSampler::budget() {
  std::lock_guard lk(policy_mu_);
  const auto& o = policy_.options();
  return {policy_.recoveries_in_window(), o.max_recoveries, o.recovery_window};
}

std::vector<MonitorSampleCount> HealthSampler::sample_counts() const {
  auto n = [](const auto& c) { return c.samples.load(std::memory_order_relaxed); };
  return {{"psi", n(psi_obs_)},
          {"meminfo", n(mem_obs_)},
          {"process", n(proc_obs_)},
          {"log", n(log_obs_)},
          {"step_deadline", n(step_obs_)},
          {"fabric", n(fabric_obs_)},
          {"gpu", n(gpu_obs_)}};
}

}  // namespace inferd::daemon
