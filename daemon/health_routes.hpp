// The routes an orchestrator and a monitoring system call:
//   GET /health/live   200 while the process and its supervisor loop are alive
//   GET /health/ready  200 in Serving; otherwise 503 with Retry-After, naming
//                      the state and the lifecycle's activity
//   GET /metrics       Prometheus text exposition format 0.0.4
//   GET /v1/models     the served model, in the OpenAI list shape
// All of them keep answering while the server drains.
#pragma once
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

namespace inferd::daemon {

class HttpServer;
class Lifecycle;
class Metrics;

struct ModelInfo {
  std::string id;         // the name clients send as "model"
  std::string root;       // where it was loaded from
  int64_t max_model_len = 0;
  int64_t created = 0;    // Unix seconds
};

// The model's checksum manifest check (daemon/model_integrity.hpp), shown in
// /v1/models' entry as "integrity" for `inferctl proof`'s integrity gate.
struct ModelIntegrity {
  std::string status;    // "verified", or "no_manifest" (nothing was checked)
  std::string manifest;  // the manifest's path when verified
  uint64_t files = 0, bytes = 0;
  double seconds = 0;
};

// The model being served, set once it has loaded (after the server started);
// until then /v1/models lists none. Thread-safe.
class ServedModel {
 public:
  void set(ModelInfo info);
  std::optional<ModelInfo> get() const;
  // Set in Loading, before the load; kept when set() replaces the rest.
  void set_integrity(ModelIntegrity integrity);
  std::optional<ModelIntegrity> integrity() const;

 private:
  mutable std::mutex mu_;
  std::optional<ModelInfo> info_;
  std::optional<ModelIntegrity> integrity_;
};

struct HealthRouteOptions {
  // Whether the supervisor loop still ticks; unset: the process answering is enough.
  std::function<bool()> loop_alive;
  // Non-empty: /v1/models requires "Authorization: Bearer <key>", as the other /v1 routes do.
  std::string api_key;
  // False on a worker rank: it serves no model, so no /v1/models.
  bool models = true;
};

// Register before the server starts. Every argument must outlive the server.
void register_health_routes(HttpServer& http, const Lifecycle& lifecycle, const Metrics& metrics,
                            const ServedModel& model, HealthRouteOptions options = {});

}  // namespace inferd::daemon
