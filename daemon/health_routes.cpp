#include "daemon/health_routes.hpp"

#include "daemon/api_key.hpp"

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

#include "daemon/http_server.hpp"
#include "daemon/json_error.hpp"
#include "daemon/lifecycle.hpp"
#include "daemon/metrics.hpp"

namespace inferd::daemon {

namespace {

// Long enough not to hammer a loading daemon, short enough to notice it is ready.
constexpr const char* kRetryAfterSeconds = "5";

std::string not_ready_message(State state, const std::string& activity) {
  std::string msg = "inferd is " + std::string(to_string(state));
  if (!activity.empty()) msg += " (" + activity + ")";
  switch (state) {
    case State::Draining:
    case State::Stopped: return msg + " and will not serve again";
    case State::Failed: return msg;
    default: return msg + "; not ready to serve yet";
  }
}

}  // namespace

void ServedModel::set(ModelInfo info) {
  std::lock_guard lock(mu_);
  info_ = std::move(info);
}

std::optional<ModelInfo> ServedModel::get() const {
  std::lock_guard lock(mu_);
  return info_;
}

void ServedModel::set_integrity(ModelIntegrity integrity) {
  std::lock_guard lock(mu_);
  integrity_ = std::move(integrity);
}

std::optional<ModelIntegrity> ServedModel::integrity() const {
  std::lock_guard lock(mu_);
  return integrity_;
}

void register_health_routes(HttpServer& http, const Lifecycle& lifecycle, const Metrics& metrics,
                            const ServedModel& model, HealthRouteOptions options) {
  // Health and metrics answer on the admin listener too; the API only on the main one.
  const RouteOptions always{.available_while_draining = true, .listeners = Listeners::Both};
  const RouteOptions api{.available_while_draining = true};

  http.route(
      "GET", "/health/live",
      [&lifecycle, alive = options.loop_alive](const Request&) {
        const bool ok = !alive || alive();
        boost::json::object body{{"status", ok ? "alive" : "stalled"},
                                 {"state", to_string(lifecycle.state())},
                                 {"uptime_seconds", lifecycle.uptime_s()}};
        return Response::json(ok ? 200 : 503, boost::json::serialize(body));
      },
      always);

  http.route(
      "GET", "/health/ready",
      [&lifecycle](const Request&) {
        const State state = lifecycle.state();
        const std::string activity = lifecycle.activity();
        // "phase": the same text under its old name, for existing clients.
        boost::json::object body{{"state", to_string(state)}, {"activity", activity}, {"phase", activity}};
        if (state == State::Serving) {
          body["status"] = "ready";
          return Response::json(200, boost::json::serialize(body));
        }
        body["status"] = "not_ready";
        body["error"] = error_object(503, not_ready_message(state, activity));
        Response r = Response::json(503, boost::json::serialize(body));
        r.headers.emplace_back("Retry-After", kRetryAfterSeconds);
        return r;
      },
      always);

  http.route(
      "GET", "/metrics",
      [&metrics](const Request&) {
        Response r;
        r.content_type = Metrics::kContentType;
        r.body = metrics.render();
        return r;
      },
      always);

  if (!options.models) return;
  http.route(
      "GET", "/v1/models",
      [&model, key = options.api_key](const Request& req) {
        require_api_key(req, key);
        boost::json::array data;
        if (auto m = model.get()) {
          boost::json::object entry{{"id", m->id},
                                    {"object", "model"},
                                    {"created", m->created},
                                    {"owned_by", "inferd"},
                                    {"root", m->root},
                                    {"parent", nullptr},
                                    {"max_model_len", m->max_model_len}};
          if (auto i = model.integrity()) {
            boost::json::object o{{"status", i->status}};
            if (i->status == "verified") {
              o["manifest"] = i->manifest;
              o["files"] = i->files;
              o["bytes"] = i->bytes;
              o["seconds"] = i->seconds;
            }
            entry["integrity"] = std::move(o);
          }
          data.push_back(std::move(entry));
        }
        return Response::json(200, boost::json::serialize(boost::json::object{{"object", "list"}, {"data", data}}));
      },
      api);
}

}  // namespace inferd::daemon
