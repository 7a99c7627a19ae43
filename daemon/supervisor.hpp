// The supervisor: on the daemon's supervisor loop, every tick, samples the health
// monitors and hands their signals to the recovery policy (deciding,
// supervisor_sampling), carries out its decisions (acting, supervisor_actions)
// and reports both (reporting, supervisor_report). Monitors sample in every
// state; decisions act only while Serving or Degraded, and with [health]
// enable = false not at all.
#pragma once
#include <boost/asio/steady_timer.hpp>

#include "daemon/supervisor_actions.hpp"
#include "daemon/supervisor_report.hpp"
#include "daemon/supervisor_sampling.hpp"

namespace inferd::daemon {

class Daemon;
class EngineHost;
class WarmupHost;

class Supervisor {
 public:
  // Refuses to start (throws) when MemAvailable is below [health] min_available_bytes.
  Supervisor(Daemon& daemon, EngineHost& engines, WarmupHost& warmup);
  ~Supervisor();

  // See HealthSampler::restore_stderr.
  void restore_stderr() { sampler_.restore_stderr(); }

 private:
  void tick();
  // `pressure_now`: the kernel PSI trigger fired, so pressure and memory are read at once.
  void sample_and_act(bool pressure_now = false);

  Daemon& daemon_;
  const bool enabled_;
  // Declared in this order so that a recovery in progress ends before the
  // monitors it rebaselines go away.
  HealthSampler sampler_;
  MonitorReport report_;
  SupervisorActions actions_;
  boost::asio::steady_timer timer_;
};

}  // namespace inferd::daemon
