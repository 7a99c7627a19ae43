// Operator and test endpoints that change or inspect the running daemon
// (/admin/*). They take their own key, never the API key:
//   - with an admin key (server.admin_api_key_file), every admin request needs
//     "Authorization: Bearer <admin key>", on any listener;
//   - without one, they are not served on the main listener (403 saying where
//     they are), only on the admin listener (127.0.0.1:admin_port, admin_socket),
//     which only local users reach.
// A reverse proxy makes every client look local, so the peer address decides nothing.
//
// In builds with fault points (-Dfaults=true), also:
//   GET  /admin/fault   the armed fault points: {"armed": {"name": "value", ...}}
//   POST /admin/fault   {"name": "heartbeat.stall", "value": "..."} arms a point,
//                       {"name": "heartbeat.stall", "armed": false} disarms it.
#pragma once
#include <string>

#include "daemon/http_server.hpp"

namespace inferd::daemon {

struct ServerConfig;

// Throws HttpError 401/403 unless the request may use /admin routes.
void check_admin_access(const Request& req, const std::string& admin_key);

// Registers an admin route on both listeners; `handler` sees only requests that
// check_admin_access lets through.
void route_admin(HttpServer& http, std::string method, std::string path, const std::string& admin_key,
                 SimpleHandler handler);

// /admin/fault (builds with fault points only).
void register_admin_routes(HttpServer& http, const ServerConfig& server);

}  // namespace inferd::daemon
