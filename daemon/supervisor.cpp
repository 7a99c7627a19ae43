#include "daemon/supervisor.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <sstream>

#include <boost/asio/post.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <spdlog/spdlog.h>

#include "daemon/admin_routes.hpp"
#include "daemon/daemon.hpp"
#include "daemon/engine_host.hpp"
#include "daemon/http_server.hpp"
#include "daemon/json_error.hpp"
#include "daemon/logging.hpp"
#include "daemon/warmup_host.hpp"
#include "faults/fault_points.hpp"

namespace inferd::daemon {

namespace {

using namespace std::chrono;

health::Level cap(health::Level l, health::Level most) { return l < most ? l : most; }

health::Level parse_level(const std::string& s) {
  if (s == "warn") return health::Level::Warn;
  if (s == "shed") return health::Level::Shed;
  if (s == "critical") return health::Level::Critical;
  throw ConfigError("[health] log_patterns: level must be warn, shed or critical, got '" + s + "'");
}

// The defaults plus one "category level regex" per line of [health] log_patterns.
health::LogScannerOptions scanner_options(const HealthConfig& h) {
  health::LogScannerOptions o;
  std::istringstream lines(h.log_patterns);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string category, level, regex;
    if (!(words >> category)) continue;
    if (!(words >> level) || !std::getline(words >> std::ws, regex) || regex.empty())
      throw ConfigError("[health] log_patterns: each line is 'category level regex', got '" + line + "'");
    o.patterns.push_back({category, regex, parse_level(level)});
  }
  return o;
}

health::MeminfoOptions meminfo_options(const HealthConfig& h) {
  health::MeminfoOptions o;
  o.warn = {static_cast<uint64_t>(h.mem_warn_bytes), h.mem_warn_fraction};
  o.shed = {static_cast<uint64_t>(h.mem_shed_bytes), h.mem_shed_fraction};
  o.critical = {static_cast<uint64_t>(h.mem_critical_bytes), h.mem_critical_fraction};
  return o;
}

health::PsiOptions psi_options(const HealthConfig& h) {
  auto t = [](const std::array<double, 3>& a) { return health::PsiThresholds{a[0], a[1], a[2]}; };
  return {t(h.psi_some_avg10), t(h.psi_full_avg10), t(h.psi_some_avg60), t(h.psi_full_avg60)};
}

milliseconds every(int ms, const HealthConfig& h) { return milliseconds(ms > 0 ? ms : h.interval_ms); }

double level_value(health::Level l) { return static_cast<double>(static_cast<int>(l)); }

// inferd_psi_percent{resource, kind, window}: every value of one pressure file.
void export_pressure(Metrics& m, const std::string& resource, const health::PsiResource& r) {
  if (!r.available) return;
  auto set = [&](const char* kind, const health::PsiLine& l) {
    for (auto [window, value] : {std::pair{"avg10", l.avg10}, {"avg60", l.avg60}, {"avg300", l.avg300}})
      m.gauge("inferd_psi_percent", "Pressure stall: share of time tasks stalled on a resource (%)",
              {{"resource", resource}, {"kind", kind}, {"window", window}})
          .set(value);
  };
  set("some", r.some);
  if (r.full) set("full", *r.full);
}

}  // namespace

Supervisor::Supervisor(Daemon& daemon, EngineHost& engines, WarmupHost& warmup)
    : daemon_(daemon),
      engines_(engines),
      warmup_(warmup),
      enabled_(daemon.config().health.enable),
      timer_(daemon.supervisor_loop()),
      scanner_(scanner_options(daemon.config().health)),
      psi_(psi_options(daemon.config().health), health::Procfs(daemon.config().health.procfs_root)),
      meminfo_(meminfo_options(daemon.config().health), health::Procfs(daemon.config().health.procfs_root)),
      process_({.rss_growth_warn = daemon.config().health.rss_growth_warn},
               health::Procfs(daemon.config().health.procfs_root)),
      probe_({.budget = milliseconds(daemon.config().health.probe_budget_ms)}),
      policy_({.calm_samples_to_unshed = daemon.config().health.calm_samples_to_unshed,
               .max_recoveries = daemon.config().health.max_recoveries,
               .recovery_window = seconds(daemon.config().health.recovery_window_s)}) {
  const HealthConfig& h = daemon.config().health;
  psi_obs_.every = every(h.psi_interval_ms, h);
  mem_obs_.every = every(h.meminfo_interval_ms, h);
  proc_obs_.every = every(h.process_interval_ms, h);
  log_obs_.every = every(h.log_interval_ms, h);
  step_obs_.every = every(h.watchdog_interval_ms, h);
  tick_every_ = std::min({milliseconds(h.interval_ms), psi_obs_.every, mem_obs_.every, proc_obs_.every,
                          log_obs_.every, step_obs_.every});
  watchdog_ = std::make_unique<health::StepWatchdog>(
      daemon.heartbeat(), health::StepWatchdogOptions{.floor = duration_cast<nanoseconds>(duration<double>(h.watchdog_floor_s)),
                                                      .p99_factor = h.watchdog_p99_factor});
  if (h.min_available_bytes > 0) {
    const auto m = meminfo_.sample();
    if (m.available && m.mem_available < static_cast<uint64_t>(h.min_available_bytes))
      throw std::runtime_error(fmt::format("only {} MiB of memory available, below [health] min_available_bytes ({} MiB)",
                                           m.mem_available >> 20, h.min_available_bytes >> 20));
  }
  if (enabled_ && h.capture_stderr)
    pipe_ = health::StderrPipe::install([this](std::string_view line) { scanner_.scan(line); });

  Metrics& m = daemon.metrics();
  level_ = &m.gauge("inferd_health_level", "Worst monitor level now: 0 ok, 1 warn, 2 shed, 3 critical");
  recoveries_ = &m.counter("inferd_recoveries_total", "Recoveries the supervisor ran to completion");
  sheds_ = &m.counter("inferd_sheds_total", "Times the supervisor started shedding load");
  mttr_ = &m.gauge("inferd_recovery_seconds", "Duration of the last recovery, from decision to reopened");
  m.add_collector("inferd_monitor_samples_total", "Samples each monitor has taken", MetricType::Counter, [this] {
    auto n = [](const auto& c) { return double(c.samples.load(std::memory_order_relaxed)); };
    return std::vector<Metrics::Sample>{{{{"monitor", "psi"}}, n(psi_obs_)},
                                        {{{"monitor", "meminfo"}}, n(mem_obs_)},
                                        {{{"monitor", "process"}}, n(proc_obs_)},
                                        {{{"monitor", "log"}}, n(log_obs_)},
                                        {{{"monitor", "step_watchdog"}}, n(step_obs_)}};
  });
  m.add_collector("inferd_log_lines_total", "Error lines seen on stderr by category, before and after the baseline",
                  MetricType::Counter, [this] {
                    std::vector<Metrics::Sample> out;
                    for (const auto& c : scanner_.counts()) {
                      out.push_back({{{"category", c.category}, {"baseline", "before"}}, double(c.before_baseline)});
                      out.push_back({{{"category", c.category}, {"baseline", "after"}}, double(c.after_baseline)});
                    }
                    return out;
                  });

  daemon.lifecycle().on_change([this](State, State to, std::string_view) {
    if (to == State::Serving && !baselined_.exchange(true)) on_first_serving();
  });

  if (HttpServer* http = daemon.http()) {
    auto probe_route = [this](const Request&) {
      const auto r = probe_.last();
      return Response::json(r.ran && r.ok ? 200 : 503, probe_json(r));
    };
    http->route("GET", "/health/generate", probe_route);
    http->route("GET", "/health_generate", probe_route);  // SGLang's name
    const std::string api_key = daemon.config().server.api_key;
    http->route("POST", "/admin/probe", [this, api_key](const Request& req) {
      check_admin_access(req, api_key);
      auto eng = engines_.engine();
      if (!eng || !baselined_) throw HttpError(503, "no probe before the warm-up gate has opened");
      const auto r = probe_.has_golden() ? probe_.run(*eng, probe_budget()) : probe_.capture_golden(*eng);
      if (!r.ok) probe_failed_ = true;
      return Response::json(r.ok ? 200 : 503, probe_json(r));
    });
    http->route("GET", "/admin/supervisor", [this, api_key](const Request& req) {
      check_admin_access(req, api_key);
      return Response::json(200, report_json());
    });
  }
  prober_ = std::thread([this] { probe_loop(); });
  psi_trigger_ = std::make_unique<health::PsiTrigger>(health::PsiTriggerOptions{}, health::Procfs(h.procfs_root));
  if (psi_trigger_->available()) {
    spdlog::info("supervisor: kernel PSI trigger '{}' on memory pressure", psi_trigger_->trigger());
    psi_waiter_ = std::thread([this] {
      for (;;) {
        {
          std::lock_guard lk(probe_mu_);
          if (quitting_) return;
        }
        if (psi_trigger_->wait(milliseconds(200)) == health::PsiTrigger::Wait::Fired)
          boost::asio::post(daemon_.supervisor_loop(), [this] { sample_and_act(true); });
      }
    });
  } else {
    spdlog::info("supervisor: no kernel PSI trigger ({}); sampling every {} ms", psi_trigger_->error(), h.interval_ms);
  }
  timer_.expires_after(tick_every_);
  timer_.async_wait([this](auto ec) { if (!ec) tick(); });
}

Supervisor::~Supervisor() {
  {
    std::lock_guard lk(probe_mu_);
    quitting_ = true;
  }
  probe_cv_.notify_all();
  if (prober_.joinable()) prober_.join();
  if (psi_waiter_.joinable()) psi_waiter_.join();
  if (recovery_.joinable()) recovery_.join();
  timer_.cancel();
  pipe_.reset();  // restores stderr after its last lines went through
}

void Supervisor::on_first_serving() {
  meminfo_.capture_baseline();
  process_.capture_baseline();
  scanner_.mark_baseline();
  {
    std::lock_guard lk(probe_mu_);
    probe_now_ = true;  // the first probe captures the golden
  }
  probe_cv_.notify_all();
  spdlog::info("supervisor: baselines taken (memory, RSS, error lines); capturing the probe's golden answer");
}

void Supervisor::probe_loop() {
  const double interval = daemon_.config().health.probe_interval_s;
  std::unique_lock lk(probe_mu_);
  for (;;) {
    auto ready = [&] { return quitting_ || probe_now_; };
    // Without a golden yet (its first capture failed, e.g. in a recovery), retry soon.
    const bool want_golden = baselined_ && !probe_.has_golden();
    if (want_golden) probe_cv_.wait_for(lk, seconds(1), ready);
    else if (interval > 0) probe_cv_.wait_for(lk, duration<double>(interval), ready);
    else probe_cv_.wait(lk, ready);
    if (quitting_) return;
    probe_now_ = false;
    const State s = daemon_.lifecycle().state();
    auto eng = engines_.engine();
    if (!eng || !baselined_ || (s != State::Serving && s != State::Degraded)) continue;
    lk.unlock();
    if (!probe_.has_golden()) {
      const auto r = probe_.capture_golden(*eng);
      if (r.ok) spdlog::info("supervisor: probe golden '{}' ({:.0f} ms)", r.text, r.seconds * 1e3);
      else spdlog::error("supervisor: could not capture the probe's golden: {}", r.reason);
    } else if (const auto r = probe_.run(*eng, probe_budget()); !r.ok) {
      probe_failed_ = true;
      spdlog::error("supervisor: generation probe failed: {}", r.reason);
    }
    lk.lock();
  }
}

// The probe may take as long as its tokens take at the engine's slowest recent
// steps: under load every step can carry a prefill chunk, so an answer is late
// without anything being wrong. (A p99 over every step understates that: a
// 10-minute soak with long prompts made one probe late at 3 x 14 x that p99.)
milliseconds Supervisor::probe_budget() const {
  const double slowest_s = duration<double>(watchdog_->slowest()).count();
  return milliseconds(static_cast<int64_t>(3e3 * (probe_.max_tokens() + 2) * slowest_s));
}

void Supervisor::tick() {
  try {
    sample_and_act();
  } catch (const std::exception& e) {
    spdlog::error("supervisor: sampling failed: {}", e.what());
  }
  timer_.expires_after(tick_every_);
  timer_.async_wait([this](auto ec) { if (!ec) tick(); });
}

void Supervisor::sample_and_act(bool pressure_now) {
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
  std::vector<health::Signal> signals;
  const auto& psi = psi_obs_.get(now, all || pressure_now, [&] {
    auto o = psi_.sample();
    o.signal.level = cap(o.signal.level, Level::Shed);  // pressure sheds; a recovery frees nothing
    return o;
  });
  signals.push_back(psi.signal);
  const auto& mem = mem_obs_.get(now, all || pressure_now, [&] {
    auto o = meminfo_.sample();
    o.signal.level = cap(o.signal.level, Level::Shed);
    return o;
  });
  signals.push_back(mem.signal);
  const auto& proc = proc_obs_.get(now, all, [&] {
    auto o = process_.sample();
    o.signal.level = cap(o.signal.level, Level::Warn);
    return o;
  });
  signals.push_back(proc.signal);
  signals.push_back(log_obs_.get(now, all, [&] { return scanner_.sample(); }).signal);
  const auto& hb = daemon_.heartbeat();
  if (const uint64_t steps = hb.steps_completed(); steps != steps_seen_) {
    steps_seen_ = steps;
    watchdog_->record_step(duration_cast<nanoseconds>(hb.last_step()));
  }
  signals.push_back(step_obs_.get(now, all, [&] { return watchdog_->sample(); }).signal);
  if (probe_failed_.exchange(false)) signals.push_back(probe_.signal());

  Metrics& m = daemon_.metrics();
  Level top = Level::Ok;
  std::string levels;
  for (const auto& s : signals) {
    top = health::worst(top, s.level);
    m.gauge("inferd_monitor_level", "Each monitor's level now: 0 ok, 1 warn, 2 shed, 3 critical", {{"monitor", s.monitor}})
        .set(level_value(s.level));
    if (s.level != Level::Ok) levels += fmt::format(" {}={} ({})", s.monitor, health::level_name(s.level), s.reason);
  }
  level_->set(level_value(top));
  if (mem.available) {
    m.gauge("inferd_mem_available_bytes", "MemAvailable as the supervisor last read it").set(double(mem.mem_available));
    m.gauge("inferd_mem_shed_floor_bytes", "MemAvailable below which the supervisor sheds").set(double(mem.shed_floor));
    m.gauge("inferd_swap_used_bytes", "SwapTotal - SwapFree").set(double(mem.swap_total - std::min(mem.swap_free, mem.swap_total)));
  }
  if (proc.available) {
    m.gauge("inferd_process_rss_bytes", "Resident set size").set(double(proc.rss_bytes));
    m.gauge("inferd_process_threads", "Threads of the process").set(double(proc.threads));
    if (proc.open_fds) m.gauge("inferd_process_open_fds", "Open file descriptors").set(double(*proc.open_fds));
  }
  export_pressure(m, "memory", psi.memory);
  export_pressure(m, "cpu", psi.cpu);
  export_pressure(m, "io", psi.io);
  if (levels != last_levels_) {
    if (levels.empty()) spdlog::info("supervisor: every monitor ok");
    else spdlog::warn("supervisor: monitors:{}", levels);
    last_levels_ = levels;
  }

  const State state = daemon_.lifecycle().state();
  health::Decision d;
  {
    std::lock_guard lk(report_mu_);
    last_signals_ = signals;
    if (!enabled_ || recovering_ || (state != State::Serving && state != State::Degraded)) return;
    d = policy_.decide(signals);
  }
  act(d);
}

void Supervisor::act(const health::Decision& d) {
  if (d.action == health::Action::None) return;
  uint64_t id = 0;
  {
    std::lock_guard lk(report_mu_);
    id = next_decision_++;
    decisions_.push_back({id, system_clock::now(), d, ""});
    if (decisions_.size() > kDecisionsKept) decisions_.pop_front();
  }
  std::string monitors;
  for (const auto& m : d.monitors) monitors += (monitors.empty() ? "" : ",") + m;
  ScopedLogFields fields({{"decision", std::to_string(id)},
                          {"action", std::string(health::action_name(d.action))},
                          {"level", std::string(health::level_name(d.level))},
                          {"monitors", monitors}});
  spdlog::warn("supervisor: {}: {}", health::action_name(d.action), d.reason);
  Lifecycle& lc = daemon_.lifecycle();
  switch (d.action) {
    case health::Action::None: break;
    case health::Action::Shed:
      sheds_->inc();
      if (lc.transition(State::Degraded, d.reason)) lc.set_phase("shedding load: " + d.reason);
      set_outcome(id, std::string("state ") + std::string(to_string(lc.state())));
      break;
    case health::Action::Unshed:
      lc.transition(State::Serving, d.reason);
      set_outcome(id, std::string("state ") + std::string(to_string(lc.state())));
      break;
    case health::Action::Recover:
      set_outcome(id, "recovering");
      recovering_ = true;
      if (recovery_.joinable()) recovery_.join();
      recovery_ = std::thread([this, reason = d.reason, id] { recover(reason, id); });
      break;
    case health::Action::Fail:
      set_outcome(id, "failed: exit 1");
      daemon_.fail("supervisor: " + d.reason);
      break;
  }
}

void Supervisor::set_outcome(uint64_t decision, std::string outcome) {
  std::lock_guard lk(report_mu_);
  for (auto& r : decisions_)
    if (r.id == decision) r.outcome = std::move(outcome);
}

void Supervisor::recover(std::string reason, uint64_t decision) {
  struct Done {
    std::atomic<bool>& flag;
    ~Done() { flag = false; }
  } done{recovering_};
  const auto start = steady_clock::now();
  ScopedLogFields fields({{"decision", std::to_string(decision)}, {"action", "recover"}});
  Lifecycle& lc = daemon_.lifecycle();
  auto failed = [&](std::string why) {
    set_outcome(decision, "failed: " + why);
    daemon_.fail(std::move(why));
  };
  if (!lc.transition(State::Recovering, reason)) return set_outcome(decision, "not started: the daemon is stopping");
  try {
    auto eng = engines_.engine();
    const int timeout = daemon_.config().health.reset_timeout_ms;
    lc.set_phase("resetting the engine");
    if (!eng->reset(reason, milliseconds(timeout)))
      return failed(fmt::format("the engine did not leave its step within {} ms of a reset ({})", timeout, reason));
    if (!lc.transition(State::Warming, "engine reset; warming again")) return set_outcome(decision, "interrupted");
    warmup_.warm(daemon_);
    scanner_.mark_baseline();
    resample_all_ = true;
    eng->release_held();
    if (!lc.transition(State::Serving, "recovered from: " + reason)) return set_outcome(decision, "interrupted");
  } catch (const std::exception& e) {
    if (!daemon_.stopping()) failed(std::string("recovery failed: ") + e.what());
    else set_outcome(decision, "interrupted: the daemon is stopping");
    return;
  }
  const double secs = duration<double>(steady_clock::now() - start).count();
  recoveries_->inc();
  mttr_->set(secs);
  set_outcome(decision, fmt::format("recovered in {:.2f} s", secs));
  ScopedLogFields outcome({{"recovery_seconds", fmt::format("{:.3f}", secs)}});
  spdlog::info("supervisor: recovered in {:.2f} s (fault: {})", secs, reason);
  {
    std::lock_guard lk(probe_mu_);
    probe_now_ = true;  // check the answer right away
  }
  probe_cv_.notify_all();
}

std::string Supervisor::report_json() {
  namespace json = boost::json;
  std::lock_guard lk(report_mu_);
  json::array monitors;
  for (const auto& s : last_signals_)
    monitors.push_back(json::object{{"monitor", s.monitor}, {"level", health::level_name(s.level)}, {"reason", s.reason}});
  json::array decisions;
  for (const auto& r : decisions_) {
    json::array names;
    for (const auto& m : r.decision.monitors) names.push_back(json::string(m));
    decisions.push_back(json::object{{"id", r.id},
                                     {"at", duration_cast<milliseconds>(r.at.time_since_epoch()).count() / 1000.0},
                                     {"action", health::action_name(r.decision.action)},
                                     {"level", health::level_name(r.decision.level)},
                                     {"monitors", std::move(names)},
                                     {"reason", r.decision.reason},
                                     {"outcome", r.outcome}});
  }
  const auto& po = policy_.options();
  return json::serialize(json::object{{"enabled", enabled_},
                                      {"state", to_string(daemon_.lifecycle().state())},
                                      {"recoveries_in_window", policy_.recoveries_in_window()},
                                      {"max_recoveries", po.max_recoveries},
                                      {"recovery_window_s", po.recovery_window.count()},
                                      {"monitors", std::move(monitors)},
                                      {"decisions", std::move(decisions)}});
}

std::string Supervisor::probe_json(const health::ProbeResult& r) const {
  namespace json = boost::json;
  json::object o{{"ok", r.ran && r.ok}, {"ran", r.ran}, {"text", r.text}, {"seconds", r.seconds},
                 {"reason", r.ran ? r.reason : std::string("no probe has run yet")}};
  if (r.ran)
    o["at"] = duration_cast<milliseconds>(r.at.time_since_epoch()).count() / 1000.0;
  return json::serialize(o);
}

}  // namespace inferd::daemon
