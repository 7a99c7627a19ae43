// Connections: the part of HttpServer that speaks HTTP on a socket. Only
// http_session.cpp includes Beast.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/thread_pool.hpp>

#include "daemon/http_responder.hpp"
#include "daemon/http_router.hpp"
#include "daemon/http_server.hpp"

namespace inferd::daemon {

class Gauge;
class Metrics;
class Session;

// What the connections share with their server.
struct ServerState {
  ServerState(HttpServerOptions options, Metrics* metrics);

  // A request handed to a handler, and its end with the status it got.
  void request_started();
  void request_finished(const std::string& route, const std::string& method, int status,
                        std::chrono::steady_clock::time_point started);

  HttpServerOptions opts;
  Router router;
  Metrics* metrics;
  Gauge* in_flight_gauge = nullptr;
  std::atomic<bool> accepting{true};
  std::atomic<int> in_flight{0};
  std::shared_ptr<Gate> gate = std::make_shared<Gate>();

  std::mutex sessions_mu;
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions;
  std::size_t sessions_peak = 0;  // the most open at once since the last reset (under sessions_mu)
  // Where offloaded handlers run (RouteOptions::offload).
  boost::asio::thread_pool work;
};

// Serves requests on an accepted socket (TCP or Unix) until the client or the
// server closes it. `peer` names the client in logs; `admin`: the socket came
// from the admin listener, so only its routes are served; `one_request`: the
// connection closes after its first response.
void start_session(ServerState& server, boost::asio::generic::stream_protocol::socket socket, std::string peer,
                   bool admin, bool one_request = false);
// Answers 503 (Retry-After) on a connection over the server's limit and closes it.
void refuse_connection(ServerState& server, boost::asio::generic::stream_protocol::socket socket);
// Open connections, both listeners.
std::size_t open_connections(ServerState& server);
// Open connections now, and the most open at once since the last reset.
std::pair<std::size_t, std::size_t> connection_counts(ServerState& server);
// The peak starts again from the connections open now.
void reset_connection_peak(ServerState& server);
// Closes every connection; their pending responders report closed(). Only once
// the I/O threads have stopped.
void close_sessions(ServerState& server);

// "host:port", with brackets around an IPv6 host.
std::string endpoint_text(const std::string& host, uint16_t port);

}  // namespace inferd::daemon
