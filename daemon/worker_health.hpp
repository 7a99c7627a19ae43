// A worker rank's own health monitors (memory, pressure, RSS, error lines its
// libraries write, its step deadline): sampled on the daemon's supervisor loop
// at their cadences, exported on the worker's /metrics, and reported to the
// head with each heartbeat. The head supervises the whole group and acts on
// the worst rank; a worker never acts on its own.
#pragma once
#include <boost/asio/steady_timer.hpp>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "daemon/supervisor_report.hpp"
#include "daemon/supervisor_sampling.hpp"

namespace inferd::daemon {

class Daemon;

class WorkerHealth {
 public:
  // Throws when MemAvailable is below [health] min_available_bytes.
  explicit WorkerHealth(Daemon& daemon);
  ~WorkerHealth();
  WorkerHealth(const WorkerHealth&) = delete;
  WorkerHealth& operator=(const WorkerHealth&) = delete;

  // The monitors that are not ok, each at the worst level it reached since the
  // previous call (an error line is seen by one sample only: a heartbeat
  // carries every sample since the last), or at the last sample's level when
  // none came since. From the control plane's thread.
  std::vector<health::Signal> report();
  // The group re-forms: what was seen belongs to the old one.
  void clear();
  // See HealthSampler::restore_stderr.
  void restore_stderr() { sampler_.restore_stderr(); }

 private:
  void tick();
  void sample(bool pressure_now);

  HealthSampler sampler_;
  MonitorReport report_;
  boost::asio::steady_timer timer_;
  std::mutex mu_;
  std::map<std::string, health::Signal> worst_;  // by monitor, since the last report()
  std::map<std::string, health::Signal> now_;    // by monitor, in the last sample
};

}  // namespace inferd::daemon
