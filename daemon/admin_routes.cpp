#include "daemon/admin_routes.hpp"

#include "daemon/api_key.hpp"

#include <string>

#include <boost/asio/ip/address.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <spdlog/spdlog.h>

#include "daemon/config.hpp"
#include "daemon/http_server.hpp"
#include "daemon/json_error.hpp"
#include "faults/fault_points.hpp"

namespace inferd::daemon {

namespace {

// `peer` is "address:port", the address possibly in brackets.
bool is_loopback(std::string_view peer) {
  const size_t colon = peer.rfind(':');
  std::string_view addr = colon == std::string_view::npos ? peer : peer.substr(0, colon);
  if (addr.size() >= 2 && addr.front() == '[' && addr.back() == ']') addr = addr.substr(1, addr.size() - 2);
  boost::system::error_code ec;
  const auto ip = boost::asio::ip::make_address(std::string(addr), ec);
  if (ec) return false;
  if (ip.is_v6() && ip.to_v6().is_v4_mapped())
    return boost::asio::ip::make_address_v4(boost::asio::ip::v4_mapped, ip.to_v6()).is_loopback();
  return ip.is_loopback();
}

}  // namespace

void check_admin_access(const Request& req, const std::string& api_key) {
  if (!api_key.empty()) {
    if (!has_api_key(req, api_key)) throw HttpError(401, "admin endpoints need the API key");
  } else if (!is_loopback(req.peer)) {
    throw HttpError(403, "admin endpoints answer loopback clients only unless an API key is configured");
  }
}

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
  const std::string api_key = server.api_key;
  http.route("GET", "/admin/fault", [api_key](const Request& req) {
    check_admin_access(req, api_key);
    return Response::json(200, armed_json());
  });
  http.route("POST", "/admin/fault", [api_key](const Request& req) {
    check_admin_access(req, api_key);
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

}  // namespace inferd::daemon
