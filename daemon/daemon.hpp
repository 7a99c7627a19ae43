// The process: owns the configuration, lifecycle, metrics, HTTP server and the
// supervisor loop, and walks the lifecycle from Starting to Serving and, on
// SIGTERM, through Draining to Stopped. systemd hears about every step.
//
// Threads: run() is the supervisor loop (signals, sd_notify watchdog and
// start-timeout extensions, drain); start-up work (the load and warm-up hooks)
// runs on its own thread so the loop keeps ticking through long loads; HTTP runs
// on the server's I/O threads.
#pragma once
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include "daemon/config.hpp"
#include "daemon/health_routes.hpp"
#include "daemon/lifecycle.hpp"
#include "daemon/metrics.hpp"
#include "daemon/systemd_notify.hpp"
#include "engine/step_heartbeat.hpp"

namespace inferd::daemon {

class HttpServer;

// The longest Loading may take, in seconds: [engine] load_timeout_s, or when it
// is 0, max(60, the model file's size / 50 MB/s) (60 when the size is unknown),
// the size counted twice when a checksum manifest is verified first.
double load_timeout_s(const Config& cfg);
// The bytes a load reads: the GGUF file's size, or a checkpoint directory's
// *.safetensors together; 0 when unknown.
uint64_t model_bytes(const std::string& path);

class Daemon {
 public:
  using Hook = std::function<void(Daemon&)>;

  // `cmd` is kept so SIGHUP can rebuild the configuration as start-up did.
  Daemon(Config config, CommandLine cmd);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Start-up work, set before run(): `load` runs in Loading (default:
  // check_model_file), `warm` in Warming (default: nothing); Serving follows.
  // An exception fails start-up with its message (exit 1). Both run on the
  // start-up thread and should return soon after stopping() turns true.
  void set_load_hook(Hook load);
  void set_warm_hook(Hook warm);
  // Until an engine beats the step heartbeat, the supervisor loop beats it.
  // Call with false from the load hook once an engine drives it.
  void set_drive_heartbeat(bool drive);
  // Before run(): how to end the generations still in flight with an error when
  // the daemon fails or stops without waiting for them, so none goes unanswered.
  void set_in_flight_ender(std::function<void(const std::string& reason)> end);
  // Before run(): the deadline of the engine's step in progress, scaled to its
  // work (the supervisor's step deadline monitor). systemd's watchdog is pinged
  // while the step is younger than the longer of it and WATCHDOG_USEC.
  void set_step_deadline(std::function<std::chrono::nanoseconds()> deadline);

  // Runs until Stopped (returns 0) or Failed (returns 1). Loading that outlasts
  // load_timeout_s() fails; the start-up thread, stuck in it, is left behind.
  int run();
  // After run(): start-up work (a load that never returned) was left running, so
  // the process must exit without destroying what that work uses.
  bool abandoned_startup() const { return abandoned_startup_; }

  // Thread-safe. Drain and stop, as SIGTERM does.
  void request_stop(std::string reason);
  // Thread-safe. Move to Failed and exit 1.
  void fail(std::string reason);
  // True once draining or failed: long start-up work should give up.
  bool stopping() const { return stopping_.load(); }

  const Config& config() const { return config_; }
  Lifecycle& lifecycle() { return lifecycle_; }
  Metrics& metrics() { return metrics_; }
  // Null for a headless worker rank, which serves no HTTP.
  HttpServer* http() { return http_.get(); }
  // What /v1/models lists. The load hook may set it; if it does not, the
  // configuration's model name and path are used once loading succeeds.
  ServedModel& served_model() { return served_model_; }
  engine::StepHeartbeat& heartbeat() { return heartbeat_; }
  const SystemdNotifier& notifier() const { return notifier_; }
  // The io_context run() runs: the supervisor loop. Monitors may schedule their
  // own timers on it.
  boost::asio::io_context& supervisor_loop() { return io_; }

  // The default load hook: the model file must be a readable regular file.
  static void check_model_file(Daemon& daemon);

 private:
  void on_transition(State from, State to, std::string_view reason);
  void on_activity(State state, std::string_view activity);
  void register_metrics();
  void start_up();
  void wait_signals();
  void reload();
  void begin_drain(std::string reason);
  void poll_drain();
  void finish(State end, std::string reason);
  void flush_then_stop();
  void tick();
  bool loop_alive() const;
  void extend_start_timeout();
  void load_deadline_passed(double limit_s);
  void watchdog_tick();

  Config config_;
  CommandLine cmd_;
  Lifecycle lifecycle_;
  Metrics metrics_;
  ServedModel served_model_;
  SystemdNotifier notifier_;
  engine::StepHeartbeat heartbeat_;
  Hook load_ = check_model_file;
  Hook warm_;
  std::atomic<bool> drive_heartbeat_{true};
  std::function<void(const std::string&)> end_in_flight_;
  std::function<std::chrono::nanoseconds()> step_deadline_;

  boost::asio::io_context io_;
  boost::asio::signal_set signals_;
  boost::asio::steady_timer tick_timer_;
  std::atomic<std::chrono::steady_clock::rep> last_tick_{0};
  boost::asio::steady_timer extend_timer_;
  boost::asio::steady_timer load_timer_;
  boost::asio::steady_timer watchdog_timer_;
  boost::asio::steady_timer drain_timer_;
  std::chrono::steady_clock::time_point drain_deadline_;
  std::unique_ptr<HttpServer> http_;
  std::thread startup_;

  std::atomic<bool> stopping_{false};
  std::atomic<bool> ready_sent_{false};
  std::atomic<bool> load_timed_out_{false};
  std::atomic<bool> startup_done_{false};
  bool abandoned_startup_ = false;
  std::atomic<int> exit_code_{0};
  bool watchdog_healthy_ = true;  // last verdict, to log only its changes
  Counter* watchdog_pings_ = nullptr;
};

}  // namespace inferd::daemon
