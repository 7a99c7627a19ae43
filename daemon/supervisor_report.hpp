// Reporting: what the supervisor saw and did.
//   /metrics  each monitor's level and readings (memory, RSS, pressure), samples
//             taken, error lines by category
//   the log   a line whenever a monitor's level changes
//   GET  /health/generate (alias /health_generate)  the last generation probe
//   POST /admin/probe                                 runs one now and answers it
//   GET  /admin/supervisor                            monitors now, recovery budget,
//                                                     the last decisions and their outcome
#pragma once
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "daemon/lifecycle.hpp"
#include "daemon/supervisor_actions.hpp"
#include "daemon/supervisor_sampling.hpp"

namespace inferd::daemon {

class Gauge;
class HttpServer;
class Metrics;

// What GET /admin/supervisor answers.
struct SupervisorStatus {
  bool enabled = false;
  State state = State::Starting;
  RecoveryBudget budget;
  std::vector<health::Signal> monitors;
  std::vector<DecisionRecord> decisions;
};

std::string supervisor_json(const SupervisorStatus& s);
std::string probe_json(const health::ProbeResult& r);

class MonitorReport {
 public:
  // Registers the gauges, and counters read from `sampler` when /metrics is scraped.
  MonitorReport(Metrics& metrics, const HealthSampler& sampler);
  // Each tick, from the supervisor loop.
  void record(const MonitorSample& s);
  // The signals of the last record(); from any thread.
  std::vector<health::Signal> last_signals() const;

 private:
  Metrics& metrics_;
  Gauge* level_ = nullptr;    // worst level now (0 ok .. 3 critical)
  std::string last_levels_;   // to log only changes of the monitors' levels
  mutable std::mutex mu_;
  std::vector<health::Signal> last_signals_;
};

struct SupervisorRoutes {
  std::function<health::ProbeResult()> last_probe;
  // nullopt: no probe can run yet (answered 503).
  std::function<std::optional<health::ProbeResult>()> probe_now;
  std::function<SupervisorStatus()> status;
};

// The /admin routes take the admin key (see admin_routes.hpp).
void register_supervisor_routes(HttpServer& http, const std::string& admin_key, SupervisorRoutes routes);

}  // namespace inferd::daemon
