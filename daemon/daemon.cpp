#include "daemon/daemon.hpp"

#include <fcntl.h>
#include <malloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <stdexcept>

#include <boost/asio/post.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/admin_routes.hpp"
#include "daemon/fabric_preflight.hpp"
#include "daemon/http_server.hpp"
#include "daemon/logging.hpp"
#include "daemon/model_integrity.hpp"
#include "engine/model_manifest.hpp"

namespace inferd::daemon {

namespace {

using namespace std::chrono_literals;

// The supervisor's own period: beats the stand-in heartbeat.
constexpr auto kTickPeriod = 100ms;
// A supervisor loop that has not ticked for this long is reported stalled by /health/live.
constexpr auto kLoopStalledAfter = 5s;
// While Loading and Warming, systemd's start timeout is pushed this far ahead,
// renewed every kExtendPeriod while the heartbeat is healthy (see
// extend_start_timeout). In Loading the supervisor loop beats the heartbeat
// itself, so a wedged load is ended by the load deadline instead.
constexpr auto kExtendBy = 30s;
constexpr auto kExtendPeriod = 10s;
// The default load deadline: the model file read at this rate, but never less than kMinLoadTimeoutS.
constexpr double kLoadBytesPerSecond = 50e6;
constexpr double kMinLoadTimeoutS = 60;
// How often a drain checks for requests still in flight.
constexpr auto kDrainPoll = 20ms;
// How long answers that end requests with an error get to reach their clients
// before a stopping daemon closes the sockets.
constexpr auto kFlushTimeout = 2s;
// How long a stopping daemon waits for its start-up work (a warm-up notices the
// stop within a phase poll; a load stuck in a hung disk or driver never does).
constexpr auto kStartupGrace = 10s;

HttpServerOptions http_options(const ServerConfig& s) {
  HttpServerOptions o;
  o.host = s.host;
  o.port = static_cast<uint16_t>(s.port);
  o.max_body_bytes = static_cast<size_t>(s.max_body_bytes);
  o.idle_timeout = std::chrono::seconds(s.idle_timeout_s);
  o.request_timeout = std::chrono::seconds(s.request_timeout_s);
  o.io_threads = s.io_threads;
  o.work_threads = s.work_threads;
  o.max_connections = s.max_connections;
  if (s.admin_port != 0) o.admin_port = static_cast<uint16_t>(s.admin_port);
  o.admin_socket = s.admin_socket;
  return o;
}

}  // namespace

uint64_t model_bytes(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    const auto size = fs::file_size(path, ec);
    return ec ? 0 : size;
  }
  // A Hugging Face checkpoint: its weights are the bulk.
  uint64_t total = 0;
  for (const auto& e : fs::directory_iterator(path, ec))
    if (e.path().extension() == ".safetensors") total += e.file_size(ec);
  return total;
}

double load_timeout_s(const Config& cfg) {
  if (cfg.engine.load_timeout_s > 0) return cfg.engine.load_timeout_s;
  // Verifying a checksum manifest reads every byte once more before the load.
  const double reads = engine::find_manifest(cfg.model.path, cfg.model.manifest).empty() ? 1 : 2;
  return std::max(kMinLoadTimeoutS, reads * static_cast<double>(model_bytes(cfg.model.path)) / kLoadBytesPerSecond);
}

Daemon::Daemon(Config config, CommandLine cmd)
    : config_(std::move(config)),
      cmd_(std::move(cmd)),
      signals_(io_, SIGTERM, SIGINT, SIGHUP),
      tick_timer_(io_),
      extend_timer_(io_),
      load_timer_(io_),
      watchdog_timer_(io_),
      drain_timer_(io_) {
  last_tick_ = std::chrono::steady_clock::now().time_since_epoch().count();
  set_log_lifecycle(&lifecycle_);
  lifecycle_.on_change([this](State from, State to, std::string_view reason) { on_transition(from, to, reason); });
  lifecycle_.on_activity([this](State state, std::string_view activity) { on_activity(state, activity); });
  register_metrics();
  http_ = std::make_unique<HttpServer>(http_options(config_.server), &metrics_);
}

Daemon::~Daemon() {
  if (startup_.joinable()) startup_.join();
  if (http_) http_->stop();
  set_log_lifecycle(nullptr);
}

void Daemon::set_load_hook(Hook load) { load_ = std::move(load); }
void Daemon::set_warm_hook(Hook warm) { warm_ = std::move(warm); }
void Daemon::set_drive_heartbeat(bool drive) { drive_heartbeat_ = drive; }

void Daemon::check_model_file(Daemon& daemon) {
  const std::string& path = daemon.config().model.path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error(fmt::format("cannot open model file {}: {}", path, std::strerror(errno)));
  struct stat st {};
  const bool ok = ::fstat(fd, &st) == 0;
  ::close(fd);
  if (ok && S_ISDIR(st.st_mode)) {
    // A Hugging Face checkpoint; the engine reports what it lacks.
    spdlog::info("model directory {} ({} bytes of safetensors)", path, model_bytes(path));
    return;
  }
  if (!ok || !S_ISREG(st.st_mode))
    throw std::runtime_error(fmt::format("model file {} is neither a regular file nor a directory", path));
  spdlog::info("model file {} ({} bytes)", path, st.st_size);
}

void Daemon::register_metrics() {
  metrics_.add_collector("inferd_state", "1 for the lifecycle state the daemon is in.", MetricType::Gauge, [this] {
    std::vector<Metrics::Sample> out;
    const State now = lifecycle_.state();
    for (size_t i = 0; i < kStateCount; ++i) {
      const auto s = static_cast<State>(i);
      out.push_back({{{"state", std::string(to_string(s))}}, s == now ? 1.0 : 0.0});
    }
    return out;
  });
  metrics_.add_collector("inferd_state_transitions_total", "Lifecycle transitions taken, by edge.",
                         MetricType::Counter, [this] {
                           std::vector<Metrics::Sample> out;
                           const auto counts = lifecycle_.transition_counts();
                           for (size_t f = 0; f < kStateCount; ++f)
                             for (size_t t = 0; t < kStateCount; ++t)
                               if (counts[f][t] != 0)
                                 out.push_back({{{"from", std::string(to_string(static_cast<State>(f)))},
                                                 {"to", std::string(to_string(static_cast<State>(t)))}},
                                                double(counts[f][t])});
                           return out;
                         });
  metrics_.add_gauge_fn("inferd_uptime_seconds", "Seconds since the daemon started.",
                        [this] { return lifecycle_.uptime_s(); });
  // What the allocator has handed out and not had back: unlike RSS, it does not
  // count freed pages the allocator keeps, so growth here is memory still held.
  metrics_.add_gauge_fn("inferd_heap_in_use_bytes", "Bytes of the C heap in use (glibc mallinfo2: uordblks + hblkhd).",
                        [] {
                          const struct mallinfo2 m = ::mallinfo2();
                          return double(m.uordblks + m.hblkhd);
                        });
  metrics_.add_gauge_fn("inferd_engine_step_age_seconds", "Age of the engine step in progress; 0 when idle.",
                        [this] { return std::chrono::duration<double>(heartbeat_.step_age()).count(); });
  watchdog_pings_ = &metrics_.counter("inferd_watchdog_pings_total", "WATCHDOG=1 messages sent to systemd.");
}

void Daemon::on_transition(State from, State to, std::string_view reason) {
  notifier_.status(to == State::Failed ? fmt::format("Failed: {}", reason) : std::string(to_string(to)));
  switch (to) {
    case State::Loading:
    case State::Warming:
      notifier_.extend_timeout(kExtendBy);
      break;
    case State::Serving:
      if (!ready_sent_.exchange(true)) notifier_.ready();
      break;
    case State::Draining:
      notifier_.stopping();
      break;
    default:
      break;
  }
}

void Daemon::on_activity(State state, std::string_view activity) {
  notifier_.status(activity.empty() ? std::string(to_string(state)) : fmt::format("{}: {}", to_string(state), activity));
}

int Daemon::run() {
  notifier_.status("Starting");
  wait_signals();
  if (http_) {
    register_health_routes(*http_, lifecycle_, metrics_, served_model_,
                           {.loop_alive = [this] { return loop_alive(); },
                            .api_key = config_.server.api_key,
                            .models = !config_.parallel.headless});
    register_admin_routes(*http_, config_.server);
    try {
      http_->start();
    } catch (const std::exception& e) {
      fail(e.what());
      return 1;
    }
    const ServerConfig& server = config_.server;
    if (!server.admin_api_key.empty())
      spdlog::info("admin endpoints: need the admin key{}", server.admin_api_key_file.empty()
                                                                 ? std::string()
                                                                 : " from " + server.admin_api_key_file);
    else if (server.admin_port == 0 && server.admin_socket.empty())
      spdlog::info("admin endpoints: not served (no admin key, no admin listener)");
    else
      spdlog::info("admin endpoints: on the admin listener only");
  }
  if (config_.parallel.headless)
    spdlog::info("headless worker rank {} of {}: /health/*, /metrics and admin routes on {}:{}, no inference API",
                 config_.parallel.node_rank, config_.parallel.nnodes, config_.server.host, config_.server.port);

  lifecycle_.transition(State::Loading, fmt::format("model {}", config_.model.path));
  const double load_limit = load_timeout_s(config_);
  load_timer_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(load_limit)));
  load_timer_.async_wait([this, load_limit](auto ec) { if (!ec) load_deadline_passed(load_limit); });
  startup_ = std::thread([this] { start_up(); });

  tick();
  extend_timer_.expires_after(kExtendPeriod);
  extend_timer_.async_wait([this](auto ec) { if (!ec) extend_start_timeout(); });
  if (auto wd = notifier_.watchdog_timeout()) {
    spdlog::info("systemd watchdog: {} ms, pinging every {} ms", wd->count() / 1000, wd->count() / 2000);
    watchdog_timer_.expires_after(*wd / 2);
    watchdog_timer_.async_wait([this](auto ec) { if (!ec) watchdog_tick(); });
  }

  io_.run();

  // Start-up work that may be wedged (a load past its deadline, stuck in a hung
  // disk or a driver call) is not waited for: at once when the daemon failed,
  // after kStartupGrace when it stops; the caller then exits at once (main.cpp).
  if (startup_.joinable()) {
    const auto until = std::chrono::steady_clock::now() + kStartupGrace;
    while (!startup_done_ && exit_code_.load() == 0 && !load_timed_out_ && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(10ms);
    if (startup_done_) {
      startup_.join();
    } else {
      spdlog::warn("start-up work still running ({}): not waiting for it", to_string(lifecycle_.state()));
      startup_.detach();
      abandoned_startup_ = true;
    }
  }
  if (http_) http_->stop();
  return exit_code_.load();
}

void Daemon::start_up() {
  struct Done {
    std::atomic<bool>& flag;
    ~Done() { flag = true; }
  } done{startup_done_};
  try {
    if (config_.parallel.nnodes > 1) {
      lifecycle_.set_activity("fabric pre-flight");
      fabric_preflight(config_);
    }
    served_model_.set_integrity(verify_model_integrity(
        config_, [this](const std::string& s) { lifecycle_.set_activity(s); }, [this] { return stopping(); }));
    gate_model_structure(config_, [this](const std::string& s) { lifecycle_.set_activity(s); });
    if (load_) load_(*this);
    if (!served_model_.get()) {
      served_model_.set({.id = config_.model_name(),
                         .root = config_.model.path,
                         .max_model_len = config_.model.max_model_len,
                         .created = static_cast<int64_t>(std::time(nullptr))});
    }
    if (!lifecycle_.transition(State::Warming, "model loaded")) return;
    if (warm_) warm_(*this);
    lifecycle_.transition(State::Serving, "warm-up passed");
  } catch (const std::exception& e) {
    if (stopping()) {
      spdlog::info("start-up abandoned while stopping: {}", e.what());
      return;
    }
    fail(e.what());
  }
}

void Daemon::request_stop(std::string reason) {
  boost::asio::post(io_, [this, reason = std::move(reason)]() mutable { begin_drain(std::move(reason)); });
}

void Daemon::fail(std::string reason) {
  stopping_ = true;
  if (!lifecycle_.transition(State::Failed, reason)) return;
  exit_code_ = 1;
  boost::asio::post(io_, [this, reason = std::move(reason)] {
    if (end_in_flight_) end_in_flight_("inferd failed: " + reason);
    drain_deadline_ = std::chrono::steady_clock::now() + kFlushTimeout;
    flush_then_stop();
  });
}

void Daemon::set_in_flight_ender(std::function<void(const std::string&)> end) { end_in_flight_ = std::move(end); }

void Daemon::set_step_deadline(std::function<std::chrono::nanoseconds()> deadline) {
  step_deadline_ = std::move(deadline);
}

void Daemon::wait_signals() {
  signals_.async_wait([this](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    if (sig == SIGHUP) reload();
    else begin_drain(sig == SIGTERM ? "SIGTERM" : "SIGINT");
    wait_signals();
  });
}

// Only the log level reloads: everything else shapes sockets, threads and
// memory that are set up once, so it needs a restart.
void Daemon::reload() {
  try {
    const Config fresh = load_config(cmd_);
    set_log_level(parse_log_level(fresh.log.level).value_or(spdlog::level::info));
    spdlog::info("SIGHUP: log level {}", fresh.log.level);
    for (const std::string& warning : fresh.deprecated) spdlog::warn("SIGHUP: {}", warning);
    Config rest = fresh;
    rest.log.level = config_.log.level;
    rest.deprecated = config_.deprecated;  // a key's name, not its value
    if (!(rest == config_)) spdlog::warn("SIGHUP: only [log] level reloads; restart inferd to apply the other changes");
  } catch (const ConfigError& e) {
    spdlog::error("SIGHUP: {}; keeping the running configuration", e.what());
  }
}

void Daemon::begin_drain(std::string reason) {
  if (lifecycle_.state() == State::Draining) {
    spdlog::warn("{} while draining: stopping without waiting for requests in flight", reason);
    finish(State::Stopped, "stopped before the drain finished");
    return;
  }
  stopping_ = true;
  if (!lifecycle_.transition(State::Draining, reason)) return;
  if (http_) http_->set_accepting(false);
  drain_deadline_ = std::chrono::steady_clock::now() + std::chrono::seconds(config_.server.drain_timeout_s);
  poll_drain();
}

void Daemon::poll_drain() {
  const int in_flight = http_ ? http_->in_flight() : 0;
  if (in_flight == 0) {
    finish(State::Stopped, "drained");
    return;
  }
  if (std::chrono::steady_clock::now() >= drain_deadline_) {
    finish(State::Stopped,
           fmt::format("drain timeout ({} s): closing {} requests in flight", config_.server.drain_timeout_s, in_flight));
    return;
  }
  drain_timer_.expires_after(kDrainPoll);
  drain_timer_.async_wait([this](auto ec) { if (!ec) poll_drain(); });
}

// Requests still in flight are ended with an error naming `reason`, and their
// answers get a moment to reach the clients before the sockets close.
void Daemon::finish(State end, std::string reason) {
  lifecycle_.transition(end, reason);
  if (end_in_flight_ && http_ && http_->in_flight() > 0) end_in_flight_("inferd is stopping: " + reason);
  drain_deadline_ = std::chrono::steady_clock::now() + kFlushTimeout;
  flush_then_stop();
}

void Daemon::flush_then_stop() {
  if (!http_ || http_->in_flight() == 0 || std::chrono::steady_clock::now() >= drain_deadline_) {
    if (http_) http_->stop();
    io_.stop();
    return;
  }
  drain_timer_.expires_after(kDrainPoll);
  drain_timer_.async_wait([this](auto ec) { if (!ec) flush_then_stop(); });
}

void Daemon::tick() {
  last_tick_ = std::chrono::steady_clock::now().time_since_epoch().count();
  if (drive_heartbeat_) {
    heartbeat_.begin_step();
    heartbeat_.end_step();
  }
  tick_timer_.expires_after(kTickPeriod);
  tick_timer_.async_wait([this](auto ec) { if (!ec) tick(); });
}

bool Daemon::loop_alive() const {
  const std::chrono::steady_clock::time_point last{std::chrono::steady_clock::duration(last_tick_.load())};
  return std::chrono::steady_clock::now() - last < kLoopStalledAfter;
}

// Renewed only while the heartbeat is healthy, so a load that wedges lets
// TimeoutStartSec= act instead of being extended for ever.
void Daemon::extend_start_timeout() {
  const State s = lifecycle_.state();
  if ((s == State::Loading || s == State::Warming) && heartbeat_.healthy(kExtendBy)) notifier_.extend_timeout(kExtendBy);
  extend_timer_.expires_after(kExtendPeriod);
  extend_timer_.async_wait([this](auto ec) { if (!ec) extend_start_timeout(); });
}

// Still Loading at the deadline: fail (exit 1), so that systemd restarts inferd
// rather than extending its start timeout for ever.
void Daemon::load_deadline_passed(double limit_s) {
  if (lifecycle_.state() != State::Loading) return;
  load_timed_out_ = true;
  fail(fmt::format("the model load did not finish within {:g} s ([engine] load_timeout_s); giving up", limit_s));
}

// systemd hears WATCHDOG=1 only while this loop runs and the engine's step
// heartbeat is healthy; a step older than the watchdog timeout counts as wedged.
void Daemon::watchdog_tick() {
  const auto timeout = *notifier_.watchdog_timeout();
  const State s = lifecycle_.state();
  const bool running = s != State::Draining && s != State::Stopped && s != State::Failed;
  if (ready_sent_ && running) {
    // A long step that its own work explains is no wedge (a 2048-token chunk at a
    // deep context can outlast WATCHDOG_USEC on a slow machine).
    std::chrono::nanoseconds deadline = timeout;
    if (step_deadline_) deadline = std::max(deadline, step_deadline_());
    const bool healthy = heartbeat_.healthy(deadline);
    if (healthy) {
      notifier_.watchdog();
      watchdog_pings_->inc();
    }
    if (healthy != watchdog_healthy_) {
      if (healthy) spdlog::info("systemd watchdog: engine step heartbeat healthy again; pinging systemd");
      else
        spdlog::error("systemd watchdog: engine step heartbeat unhealthy (step age {:.1f} s); not pinging systemd",
                      std::chrono::duration<double>(heartbeat_.step_age()).count());
      watchdog_healthy_ = healthy;
    }
  }
  watchdog_timer_.expires_after(timeout / 2);
  watchdog_timer_.async_wait([this](auto ec) { if (!ec) watchdog_tick(); });
}

}  // namespace inferd::daemon
