#include "daemon/admin_routes.hpp"

#include "daemon/api_key.hpp"

#include <string>

#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <spdlog/spdlog.h>

#include "daemon/config.hpp"
#include "daemon/http_server.hpp"
#include "daemon/json_error.hpp"
#include "faults/fault_points.hpp"

namespace inferd::daemon {

void check_admin_access(const Request& req, const std::string& admin_key) {
  if (!admin_key.empty()) {
    if (has_api_key(req, admin_key)) return;
    throw HttpError(401, req.header("Authorization").empty()
                             ? "admin endpoints need the admin key: send \"Authorization: Bearer <admin key>\""
                             : "the admin key is not valid (the API key does not open admin endpoints)");
  }
  if (!req.admin_listener)
    throw HttpError(403,
                    "admin endpoints are not served on this listener: reach them on the admin listener "
                    "(--admin-port, --admin-socket), or configure an admin key (--admin-api-key-file)",
                    "permission_error");
}

void route_admin(HttpServer& http, std::string method, std::string path, const std::string& admin_key,
                 SimpleHandler handler) {
  http.route(
      std::move(method), std::move(path),
      [admin_key, handler = std::move(handler)](const Request& req) {
        check_admin_access(req, admin_key);
        return handler(req);
      },
      // Off the I/O threads: some wait (the probe runs a generation).
      RouteOptions{.offload = true, .listeners = Listeners::Both});
}

#if INFERD_FAULTS
namespace {

std::string value_text(const boost::json::value& v) {
  if (v.is_string()) return std::string(v.as_string());
  if (v.is_null()) return {};
  if (v.is_int64() || v.is_uint64() || v.is_double() || v.is_bool()) return boost::json::serialize(v);
  throw HttpError(400, "'value' must be a string, number, boolean or null", {}, "value");
}

std::string armed_json() {
  boost::json::object armed;
  for (const auto& [name, value] : faults::armed_faults()) armed[name] = value;
  return boost::json::serialize(boost::json::object{{"armed", std::move(armed)}});
}

}  // namespace

void register_admin_routes(HttpServer& http, const ServerConfig& server) {
  route_admin(http, "GET", "/admin/fault", server.admin_api_key,
              [](const Request&) { return Response::json(200, armed_json()); });
  route_admin(http, "POST", "/admin/fault", server.admin_api_key, [](const Request& req) {
    const boost::json::object body = parse_json_object(req.body);
    const auto* name = body.if_contains("name");
    if (name == nullptr || !name->is_string() || name->as_string().empty())
      throw HttpError(400, "'name' must be a non-empty string naming a fault point", {}, "name");
    bool arm = true;
    if (const auto* armed = body.if_contains("armed")) {
      if (!armed->is_bool()) throw HttpError(400, "'armed' must be a boolean", {}, "armed");
      arm = armed->as_bool();
    }
    for (const auto& [key, v] : body)
      if (key != "name" && key != "value" && key != "armed")
        throw HttpError(400, "unknown field '" + std::string(key) + "'", {}, std::string(key));
    const std::string fault(name->as_string());
    std::string value;
    if (const auto* v = body.if_contains("value")) value = value_text(*v);
    if (arm) {
      faults::arm_fault(fault, value);
      spdlog::warn("fault point armed: {}{}{} (from {})", fault, value.empty() ? "" : "=", value, req.peer);
    } else {
      faults::disarm_fault(fault);
      spdlog::warn("fault point disarmed: {} (from {})", fault, req.peer);
    }
    return Response::json(200, boost::json::serialize(boost::json::object{
                                   {"name", fault}, {"armed", arm}, {"value", arm ? value : std::string()}}));
  });
}
#else
// A build without fault points has no /admin/fault: the path answers 404.
void register_admin_routes(HttpServer&, const ServerConfig&) {}
#endif

}  // namespace inferd::daemon
