// The HTTP front door: an HTTP/1.1 server (Boost.Beast on Asio, kept out of this
// header) with keep-alive, body-size and timeout limits, routing by method and
// path, request ids, per-request metrics, and responses that may be sent later or
// streamed from another thread (Server-Sent Events from the engine's scheduler).
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace inferd::daemon {

class Metrics;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;  // 0 picks a free port; see HttpServer::port()
  size_t max_body_bytes = 8 << 20;
  // How long a connection may take to deliver a complete request (headers and
  // body) after it opens or after its previous response; also how long one write
  // may stall on a client that does not read. Slow or silent clients are closed.
  std::chrono::milliseconds idle_timeout{std::chrono::seconds(60)};
  // From a complete request to the end of its response, streams included.
  std::chrono::milliseconds request_timeout{std::chrono::seconds(600)};
  int io_threads = 2;
  // Threads for the routes registered with RouteOptions::offload.
  int work_threads = 2;
  // Open connections beyond which a new one on the main listener is answered
  // 503 (Retry-After) and closed. The admin listener is never refused, nor a
  // health probe (a new connection whose first bytes are one GET /health/...).
  int max_connections = 4096;
  // The admin listener, beside the main one: it serves the routes registered for
  // Listeners::Admin or Both, and only those. A TCP port on 127.0.0.1 (0 picks a
  // free port; see HttpServer::admin_port()) and/or a Unix socket, created
  // owner-only (0600). Its connections are served by the thread that accepts
  // connections, not the I/O threads, so health checks there do not wait behind
  // the main listener's traffic.
  std::optional<uint16_t> admin_port;
  std::string admin_socket;  // empty: none
};

using HeaderList = std::vector<std::pair<std::string, std::string>>;

struct Request {
  std::string method;  // as sent: "GET", "POST", ...
  std::string target;  // path and query as sent
  std::string path;    // target without the query
  std::string query;   // after '?', empty if none
  HeaderList headers;
  std::string body;
  std::string request_id;  // the client's X-Request-Id, or a generated one
  std::string peer;        // "address:port", or "unix:PATH" on the admin socket
  bool admin_listener = false;  // arrived on the admin listener

  // Case-insensitive; empty when absent.
  std::string_view header(std::string_view name) const;
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  // Extra headers. Content-Type comes from content_type; Content-Length,
  // Transfer-Encoding, Connection and X-Request-Id are the server's own.
  HeaderList headers;

  static Response json(int status, std::string body);
  // An OpenAI-shaped error (see json_error.hpp).
  static Response error(int status, std::string_view message, std::string_view type = {});
};

// The way back to one request's client. Handed to a handler as a shared_ptr it
// may keep and use from any thread after returning: the server holds the
// connection open until the response is finished. Exactly one of
//   send(response)                                  one complete response, or
//   start_stream(head), write(chunk)..., end()      a chunked stream (SSE)
// happens; calls out of that order are ignored. All calls are thread-safe and
// cheap: they hand the work to the connection's strand and return.
// Dropping the last reference without finishing answers 500 (nothing sent yet)
// or ends the stream.
class Responder {
 public:
  virtual ~Responder() = default;
  virtual void send(Response response) = 0;
  // `head`'s status, content type and headers start the stream; its body, if any,
  // is the first chunk.
  virtual void start_stream(Response head) = 0;
  virtual void write(std::string chunk) = 0;
  virtual void end() = 0;

  // True once the client went away, the request timed out or the server stopped:
  // further output is dropped and the work behind it should stop.
  virtual bool closed() const = 0;
  // Called once, from an I/O thread, when closed() becomes true before the
  // response finished; at once (on the caller's thread) if it already has.
  // Keep it short: it is the place to cancel the request's work.
  virtual void on_disconnect(std::function<void()> callback) = 0;
};

// Runs on an I/O thread (or a work thread: RouteOptions::offload); must not
// block an I/O thread. May answer at once or keep the responder.
// The Request lives only for the call: copy what outlives it.
// A thrown HttpError answers with its status; any other exception answers 500.
using Handler = std::function<void(const Request&, std::shared_ptr<Responder>)>;
// A handler that answers at once.
using SimpleHandler = std::function<Response(const Request&)>;

// Which listeners serve a route: the main one (the API), the admin one, or both.
// A listener answers 404 for a route it does not serve.
enum class Listeners { Main, Admin, Both };

struct RouteOptions {
  // Still served after set_accepting(false): health checks and metrics.
  bool available_while_draining = false;
  // Runs on the server's work threads, not an I/O thread: for handlers that
  // spend CPU time on the body (a chat template, tokenizing megabytes) or wait
  // (a generation probe), so the I/O threads keep answering everyone else.
  bool offload = false;
  Listeners listeners = Listeners::Main;
};

class HttpServer {
 public:
  // `metrics`, if given, must outlive the server; it receives
  // inferd_http_requests_total{route,method,code},
  // inferd_http_request_duration_seconds{route} and inferd_http_requests_in_flight.
  explicit HttpServer(HttpServerOptions options, Metrics* metrics = nullptr);
  ~HttpServer();  // stop()s
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Routes are matched on the exact path first, then on the longest registered
  // prefix. Register before start(). A known path with another method answers 405
  // with Allow; an unknown path 404.
  void route(std::string method, std::string path, Handler handler, RouteOptions options = {});
  void route(std::string method, std::string path, SimpleHandler handler, RouteOptions options = {});
  void route_prefix(std::string method, std::string prefix, Handler handler, RouteOptions options = {});

  // Binds, listens (the admin listener too, if any) and starts the accept thread
  // and the I/O threads.
  // Throws std::runtime_error ("cannot listen on 127.0.0.1:8000: Address already in use").
  void start();
  // Closes the listener and every connection (their responders report closed()),
  // then joins the I/O threads. Idempotent.
  void stop();

  // false: new requests (except routes available while draining) are answered
  // 503 with Retry-After and their connections closed; requests in flight finish.
  void set_accepting(bool accepting);
  bool accepting() const;

  // Requests handed to a handler whose response has not finished.
  int in_flight() const;
  // The bound port (useful with port 0), valid after start().
  uint16_t port() const;
  // The admin listener's bound TCP port, 0 when it has none; valid after start().
  uint16_t admin_port() const;
  const HttpServerOptions& options() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace inferd::daemon
