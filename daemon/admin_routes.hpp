// Operator and test endpoints that change the running daemon:
//   GET  /admin/fault   the armed fault points: {"armed": {"name": "value", ...}}
//   POST /admin/fault   {"name": "heartbeat.stall", "value": "..."} arms a point,
//                       {"name": "heartbeat.stall", "armed": false} disarms it.
// Without an API key they answer loopback clients only; with one, they require it.
#pragma once
#include <string>

namespace inferd::daemon {

class HttpServer;
struct Request;
struct ServerConfig;

// Throws HttpError 401/403 unless the request may use /admin routes.
void check_admin_access(const Request& req, const std::string& api_key);

void register_admin_routes(HttpServer& http, const ServerConfig& server);

}  // namespace inferd::daemon
