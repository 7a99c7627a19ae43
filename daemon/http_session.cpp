// One Session per connection, all of its work on the strand its socket was
// accepted on. A request is read (headers, then body) within the idle timeout,
// routed, and handed to a handler with a Responder. While the response is pending
// the session keeps reading the socket, so a client that hangs up is noticed at
// once and its work cancelled. Responses go out as Beast messages: a complete
// response through http::async_write, a stream as a head (response_serializer)
// followed by chunks.
#include "daemon/http_session.hpp"

#include <algorithm>
#include <deque>
#include <optional>
#include <random>
#include <variant>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/core/basic_stream.hpp>
#include <boost/beast/http/chunk_encode.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <spdlog/spdlog.h>

#include "daemon/json_error.hpp"
#include "daemon/logging.hpp"
#include "daemon/metrics.hpp"

namespace inferd::daemon {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using Socket = asio::generic::stream_protocol::socket;
using Stream = beast::basic_stream<asio::generic::stream_protocol>;
using error_code = boost::system::error_code;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kHeaderLimit = 16 * 1024;
// Bytes of a pipelined next request buffered while a response is pending; beyond
// this the session stops reading until the response is done.
constexpr size_t kPipelineBuffer = 64 * 1024;
// How long a closing connection waits for the client's unread bytes (say, the rest
// of an oversized body) so the error response is not lost to a TCP reset.
constexpr std::chrono::milliseconds kLinger{2000};
constexpr int kStatusClientGone = 499;  // nginx's "client closed request", for metrics only

// Header names and values come from handlers; CR and LF would split the response.
std::string header_safe(std::string_view s) {
  std::string out(s);
  std::replace_if(out.begin(), out.end(), [](char c) { return c == '\r' || c == '\n'; }, ' ');
  return out;
}

// Headers the server sets itself; a handler's own are dropped.
bool server_owned(std::string_view name) {
  switch (http::string_to_field(name)) {
    case http::field::content_length:
    case http::field::transfer_encoding:
    case http::field::connection:
    case http::field::content_type:
      return true;
    default:
      return beast::iequals(name, "X-Request-Id");
  }
}

bool valid_request_id(std::string_view id) {
  if (id.empty() || id.size() > 200) return false;
  return std::all_of(id.begin(), id.end(), [](char c) { return c > 0x20 && c < 0x7f; });
}

std::string new_request_id() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(32, '0');
  for (int half = 0; half < 2; ++half) {
    uint64_t bits = rng();
    for (int i = 0; i < 16; ++i, bits >>= 4) id[half * 16 + i] = kHex[bits & 15];
  }
  return id;
}

// Standard methods keep their name in metrics; anything else is "other", so a
// client cannot create unbounded label values.
std::string method_label(std::string_view m) {
  static constexpr std::string_view kKnown[] = {"GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"};
  for (auto k : kKnown)
    if (m == k) return std::string(m);
  return "other";
}

Request to_request(http::request<http::string_body>& msg, std::string peer, bool admin) {
  Request req;
  req.method = msg.method_string();
  req.target = msg.target();
  const auto q = req.target.find('?');
  req.path = req.target.substr(0, q);
  if (q != std::string::npos) req.query = req.target.substr(q + 1);
  for (const auto& f : msg) req.headers.emplace_back(f.name_string(), f.value());
  const std::string_view id = msg["X-Request-Id"];
  req.request_id = valid_request_id(id) ? std::string(id) : new_request_id();
  req.body = std::move(msg.body());
  req.peer = std::move(peer);
  req.admin_listener = admin;
  return req;
}

// The end of a chunked stream: the zero-length chunk.
struct LastChunk {};

// One part of a response waiting its turn on the socket.
using Piece = std::variant<http::response<http::string_body>,  // a complete response
                           http::response<http::empty_body>,   // the head of a stream
                           std::string,                         // a stream's data
                           LastChunk>;

}  // namespace

class Session final : public ExchangeHost, public std::enable_shared_from_this<Session> {
 public:
  Session(ServerState& server, Socket socket, std::string peer, bool admin, bool one_request)
      : server_(server),
        stream_(std::move(socket)),
        deadline_(stream_.get_executor()),
        peer_(std::move(peer)),
        admin_(admin),
        one_request_(one_request) {}

  ~Session() {
    std::lock_guard lock(server_.sessions_mu);
    server_.sessions.erase(this);
  }

  void start() {
    {
      std::lock_guard lock(server_.sessions_mu);
      server_.sessions[this] = weak_from_this();
      server_.sessions_peak = std::max(server_.sessions_peak, server_.sessions.size());
    }
    read_request();
  }

  // From any thread, under the server's open gate (so the io_context is alive).
  void post(std::shared_ptr<Exchange> ex, ResponderCall call) override {
    asio::post(stream_.get_executor(), [self = shared_from_this(), ex = std::move(ex), call = std::move(call)]() mutable {
      if (!self->closed_ && self->exchange_ == ex) self->apply(std::move(call));
    });
  }

  // Called by stop() once the I/O threads are joined: nothing else runs now.
  void shut_down() { abort("server stopping"); }

 private:
  enum class ResponseState { Idle, Pending, Streaming, Finishing };
  // What follows a finished response once the read watching the client stops.
  enum class Next { ReadRequest, Linger };

  // --- reading a request ------------------------------------------------------

  void read_request() {
    if (closed_) return;
    parser_.emplace();
    parser_->body_limit(server_.opts.max_body_bytes);
    parser_->header_limit(kHeaderLimit);
    // Headers and body together must arrive within the idle timeout.
    stream_.expires_after(server_.opts.idle_timeout);
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = shared_from_this()](error_code ec, size_t) { self->on_header(ec); });
  }

  void on_header(error_code ec) {
    if (closed_) return;
    if (ec) return read_failed(ec);
    if (beast::iequals(parser_->get()[http::field::expect], "100-continue") && !parser_->is_done()) {
      // The client waits for this before it sends the body.
      http::async_write(stream_, continue_, [self = shared_from_this()](error_code ec, size_t) {
        if (self->closed_) return;
        if (ec) return self->abort("client went away");
        self->read_body();
      });
      return;
    }
    read_body();
  }

  void read_body() {
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](error_code ec, size_t) { self->on_body(ec); });
  }

  void on_body(error_code ec) {
    if (closed_) return;
    if (ec) return read_failed(ec);
    dispatch();
  }

  void read_failed(error_code ec) {
    // Beast's HTTP errors mean the bytes were not valid HTTP, except these two:
    // the client closed, between requests or in the middle of one.
    const bool malformed = ec.category() == http::make_error_code(http::error::bad_method).category() &&
                           ec != http::error::end_of_stream && ec != http::error::partial_message;
    if (!malformed) {
      if (ec == beast::error::timeout) return abort("idle timeout");
      return abort(ec == http::error::end_of_stream ? "" : ec.message());  // closed or reset
    }
    int status = 400;
    std::string message = "malformed HTTP request: " + ec.message();
    if (ec == http::error::body_limit) {
      status = 413;
      message = "request body exceeds the limit of " + std::to_string(server_.opts.max_body_bytes) + " bytes";
    } else if (ec == http::error::header_limit) {
      status = 431;
      message = "request headers exceed the limit of " + std::to_string(kHeaderLimit) + " bytes";
    }
    // The request may be incomplete: answer, then close the connection.
    const auto& req = parser_->get();
    request_id_ = new_request_id();
    http_version_ = req.version() ? req.version() : 11;
    keep_alive_ = false;
    const std::string_view target = req.target();
    const auto m = server_.router.match(req.method_string(), target.substr(0, target.find('?')), admin_);
    begin_exchange(status == 413 ? m.pattern : "unmatched", method_label(req.method_string()));
    send(Response::error(status, message));
  }

  // --- answering ----------------------------------------------------------------

  void dispatch() {
    http_version_ = parser_->get().version();
    keep_alive_ = parser_->get().keep_alive() && !one_request_;
    Request req = to_request(parser_->get(), peer_, admin_);
    request_id_ = req.request_id;

    const auto m = server_.router.match(req.method, req.path, admin_);
    begin_exchange(m.pattern, method_label(req.method));
    start_deadline();
    watch_client();

    if (!m.route) return send(m.refusal(req.method, req.path));
    if (!server_.accepting && !m.route->options.available_while_draining) {
      close_after_ = true;
      Response r = Response::error(503, "the server is shutting down and accepts no new requests");
      r.headers.emplace_back("Retry-After", "5");
      return send(std::move(r));
    }

    auto responder = make_responder(exchange_);
    if (m.route->options.offload) {
      boost::asio::post(server_.work, [route = m.route, req = std::move(req), responder] {
        run_handler(*route, req, responder);
      });
      return;
    }
    run_handler(*m.route, req, responder);
  }

  static void run_handler(const Route& route, const Request& req, const std::shared_ptr<Responder>& responder) {
    // Log records written while the handler runs carry the request id.
    ScopedRequestId scoped_id(req.request_id);
    try {
      route.handler(req, responder);
    } catch (const HttpError& e) {
      responder->send(Response::json(e.status, error_body(e.status, e.what(), e.type, e.param)));
    } catch (const std::exception& e) {
      spdlog::error("http: {} {} failed: {}", req.method, req.path, e.what());
      responder->send(Response::error(500, std::string("internal error: ") + e.what()));
    }
  }

  void begin_exchange(std::string route, std::string method) {
    exchange_ = std::make_shared<Exchange>(server_.gate, weak_from_this());
    route_ = std::move(route);
    method_ = std::move(method);
    started_ = Clock::now();
    status_ = 0;
    chunked_ = false;
    response_ = ResponseState::Pending;
    server_.request_started();
  }

  // Ends the current exchange exactly once, whichever way it ended.
  void end_exchange(bool client_gone) {
    if (!exchange_) return;
    auto ex = std::move(exchange_);
    response_ = ResponseState::Idle;
    deadline_.cancel();
    if (client_gone) ex->disconnect();
    else ex->finish();
    server_.request_finished(route_, method_, client_gone && status_ == 0 ? kStatusClientGone : status_, started_);
  }

  void apply(ResponderCall call) {
    switch (call.kind) {
      case ResponderCall::Kind::Send: return send(std::move(call.response));
      case ResponderCall::Kind::StartStream: return start_stream(std::move(call.response));
      case ResponderCall::Kind::Write: return write(std::move(call.chunk));
      case ResponderCall::Kind::End: return end();
      case ResponderCall::Kind::Abandon: return abandoned();
    }
  }

  void send(Response r) {
    if (response_ != ResponseState::Pending) return;
    auto msg = head<http::string_body>(r);
    // HTTP allows 1xx, 204 and 304 no body, and prepare_payload() throws on one.
    const auto code = msg.result();
    if (http::to_status_class(code) != http::status_class::informational && code != http::status::no_content &&
        code != http::status::not_modified)
      msg.body() = std::move(r.body);
    msg.prepare_payload();
    queue(std::move(msg));
    response_ = ResponseState::Finishing;
  }

  void start_stream(Response r) {
    if (response_ != ResponseState::Pending) return;
    // HTTP/1.0 has no chunked encoding: the stream ends when the connection does.
    chunked_ = http_version_ >= 11;
    if (!chunked_) close_after_ = true;
    auto msg = head<http::empty_body>(r);
    msg.chunked(chunked_);
    queue(std::move(msg));
    response_ = ResponseState::Streaming;
    write(std::move(r.body));
  }

  void write(std::string data) {
    // An empty chunk would end the chunked stream early.
    if (response_ != ResponseState::Streaming || data.empty()) return;
    queue(std::move(data));
  }

  void end() {
    if (response_ != ResponseState::Streaming) return;
    if (chunked_) queue(LastChunk{});
    response_ = ResponseState::Finishing;
    maybe_finish();
  }

  void abandoned() {
    if (response_ == ResponseState::Pending) send(Response::error(500, "the handler produced no response"));
    else if (response_ == ResponseState::Streaming) end();
  }

  // The status line and headers of `r`, with the server's own headers. Notes the
  // status for metrics, and while draining that the connection closes after.
  template <class Body>
  http::response<Body> head(const Response& r) {
    // Beast refuses codes outside 100-999; a handler's mistake must not end the I/O thread.
    status_ = r.status >= 100 && r.status <= 999 ? r.status : 500;
    http::response<Body> msg;
    msg.version(http_version_ >= 11 ? 11 : 10);
    msg.result(static_cast<unsigned>(status_));
    if (msg.result() == http::status::unknown) msg.reason("Status");
    for (const auto& [name, value] : r.headers)
      if (!name.empty() && !server_owned(name)) msg.insert(header_safe(name), header_safe(value));
    msg.set(http::field::content_type, header_safe(r.content_type));
    msg.set("X-Request-Id", request_id_);
    if (!server_.accepting) close_after_ = true;
    msg.keep_alive(keep_alive_ && !close_after_);
    return msg;
  }

  // --- writing ------------------------------------------------------------------

  void queue(Piece piece) {
    queue_.push_back(std::move(piece));
    write_next();
  }

  void write_next() {
    if (writing_ || queue_.empty()) return;
    writing_.emplace(std::move(queue_.front()));
    queue_.pop_front();
    // A client that stops reading stalls the write; do not wait on it forever.
    // (The read watching the client, if pending, keeps its own expiry.)
    stream_.expires_after(server_.opts.idle_timeout);
    auto done = [self = shared_from_this()](error_code ec, size_t) { self->on_written(ec); };
    if (auto* msg = std::get_if<http::response<http::string_body>>(&*writing_)) {
      http::async_write(stream_, *msg, std::move(done));
    } else if (auto* stream_head = std::get_if<http::response<http::empty_body>>(&*writing_)) {
      head_writer_.emplace(*stream_head);
      http::async_write_header(stream_, *head_writer_, std::move(done));
    } else if (auto* data = std::get_if<std::string>(&*writing_)) {
      if (chunked_) asio::async_write(stream_, http::make_chunk(asio::buffer(*data)), std::move(done));
      else asio::async_write(stream_, asio::buffer(*data), std::move(done));
    } else {
      asio::async_write(stream_, http::make_chunk_last(), std::move(done));
    }
  }

  void on_written(error_code ec) {
    head_writer_.reset();  // before the message it refers to
    writing_.reset();
    if (closed_) return;
    if (ec) return abort(ec == beast::error::timeout ? "write timed out" : "client went away");
    if (!queue_.empty()) return write_next();
    maybe_finish();
  }

  void maybe_finish() {
    if (response_ != ResponseState::Finishing || writing_ || !queue_.empty()) return;
    end_exchange(/*client_gone=*/false);
    proceed(close_after_ || !keep_alive_ ? Next::Linger : Next::ReadRequest);
  }

  // Goes on to `next` once the read watching the client has stopped.
  void proceed(Next next) {
    next_ = next;
    if (watching_) return stream_.cancel();  // on_watch goes on
    next_ == Next::Linger ? linger() : read_request();
  }

  // --- watching the client while a response is pending -------------------------

  void watch_client() {
    if (watching_ || closed_) return;
    watching_ = true;
    // Only a hang-up ends this read; the request's deadline bounds the wait.
    stream_.expires_never();
    stream_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](error_code ec, size_t n) {
      self->on_watch(ec, n);
    });
  }

  void on_watch(error_code ec, size_t n) {
    watching_ = false;
    if (closed_) return;
    if (!ec) buffer_.commit(n);
    // Cancelled by proceed() once the exchange is over; anything else is a hang-up.
    else if (exchange_ || ec != asio::error::operation_aborted) return abort("client went away");
    if (exchange_) {
      // Bytes of a pipelined request: keep them for later and keep watching.
      if (buffer_.size() < kPipelineBuffer) watch_client();
      return;
    }
    proceed(next_);
  }

  // Half-closes after the last response and waits briefly for the client's close,
  // so it reads the response instead of a reset.
  void linger() {
    error_code ignored;
    stream_.socket().shutdown(Socket::shutdown_send, ignored);
    stream_.expires_after(std::min<std::chrono::milliseconds>(kLinger, server_.opts.idle_timeout));
    buffer_.clear();
    discard();
  }

  void discard() {
    stream_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](error_code ec, size_t) {
      if (self->closed_) return;
      if (ec) return self->abort("");  // the client closed, or lingering is over
      self->discard();
    });
  }

  // --- the request deadline -------------------------------------------------------

  // The request timeout has a timer of its own: the stream's timers close the
  // socket when they fire, but a request past its deadline is still answered
  // (504, or the end of its stream) before the connection closes.
  void start_deadline() {
    deadline_.expires_after(server_.opts.request_timeout);
    // A late completion for an earlier exchange is ignored. The pending wait also
    // keeps the session alive while a handler holds its responder.
    deadline_.async_wait([self = shared_from_this(), ex = exchange_](error_code ec) {
      if (!ec && !self->closed_ && self->exchange_ == ex) self->request_timed_out();
    });
  }

  void request_timed_out() {
    spdlog::warn("http: request {} ({}) timed out after {} ms", request_id_, route_,
                 server_.opts.request_timeout.count());
    // The work behind it stops; the client learns why if nothing was sent yet.
    exchange_->disconnect();
    close_after_ = true;
    if (response_ == ResponseState::Pending) send(Response::error(504, "the request timed out"));
    else if (response_ == ResponseState::Streaming) end();
    maybe_finish();
  }

  // Closes the connection now; a pending response counts as a disconnect.
  void abort(std::string_view why) {
    if (closed_) return;
    if (!why.empty()) spdlog::debug("http: closing {}: {}", peer_, why);
    end_exchange(/*client_gone=*/true);
    closed_ = true;
    error_code ignored;
    stream_.socket().shutdown(Socket::shutdown_both, ignored);
    stream_.close();
  }

  ServerState& server_;
  Stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::response<http::empty_body> continue_{http::status::continue_, 11};
  asio::steady_timer deadline_;
  std::string peer_;
  bool admin_;  // accepted by the admin listener
  bool one_request_;  // the connection closes after its first response

  bool closed_ = false;
  bool watching_ = false;
  Next next_ = Next::ReadRequest;
  std::deque<Piece> queue_;
  std::optional<Piece> writing_;  // the piece on the socket now
  std::optional<http::response_serializer<http::empty_body>> head_writer_;

  // The current request.
  std::shared_ptr<Exchange> exchange_;
  ResponseState response_ = ResponseState::Idle;
  std::string request_id_;
  std::string route_;
  std::string method_;
  Clock::time_point started_;
  int status_ = 0;
  unsigned http_version_ = 11;
  bool keep_alive_ = true;
  bool close_after_ = false;
  bool chunked_ = false;
};

// ---------------------------------------------------------------------------

ServerState::ServerState(HttpServerOptions options, Metrics* m)
    : opts(std::move(options)), metrics(m), work(static_cast<std::size_t>(std::max(1, opts.work_threads))) {
  if (opts.io_threads < 1) opts.io_threads = 1;
  if (opts.request_timeout.count() <= 0) opts.request_timeout = std::chrono::hours(24 * 365);
  if (opts.idle_timeout.count() <= 0) opts.idle_timeout = std::chrono::seconds(60);
  if (metrics) in_flight_gauge = &metrics->gauge("inferd_http_requests_in_flight", "HTTP requests being answered.");
}

void ServerState::request_started() {
  ++in_flight;
  if (in_flight_gauge) in_flight_gauge->inc();
}

void ServerState::request_finished(const std::string& route, const std::string& method, int status,
                                   Clock::time_point started) {
  const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
  spdlog::debug("http: {} {} -> {} in {:.1f} ms", method, route, status, seconds * 1e3);
  if (metrics) {
    metrics
      ->counter("inferd_http_requests_total", "HTTP requests answered, by route, method and status code.",
                {{"route", route}, {"method", method}, {"code", std::to_string(status)}})
      .inc();
  metrics
      ->histogram("inferd_http_request_duration_seconds",
                  "Time from a complete request to the end of its response, by route.", {{"route", route}})
      .observe(seconds);
  }
  // Last: whoever sees in_flight fall sees the request counted.
  --in_flight;
  if (in_flight_gauge) in_flight_gauge->dec();
}

void start_session(ServerState& server, Socket socket, std::string peer, bool admin, bool one_request) {
  std::make_shared<Session>(server, std::move(socket), std::move(peer), admin, one_request)->start();
}

void refuse_connection(ServerState& server, Socket socket) {
  struct Refusal {
    explicit Refusal(Socket s) : stream(std::move(s)) {}
    beast::basic_stream<Socket::protocol_type, Socket::executor_type> stream;
    http::response<http::string_body> res;
  };
  auto r = std::make_shared<Refusal>(std::move(socket));
  r->res.result(http::status::service_unavailable);
  r->res.set(http::field::content_type, "application/json");
  r->res.set(http::field::retry_after, "1");
  r->res.keep_alive(false);
  r->res.body() = error_body(503, "too many open connections (" + std::to_string(server.opts.max_connections) +
                                      "); retry later");
  r->res.prepare_payload();
  r->stream.expires_after(std::chrono::seconds(5));  // a client that does not read is not waited for
  http::async_write(r->stream, r->res, [r](error_code, size_t) {
    error_code ignored;
    r->stream.socket().shutdown(Socket::shutdown_both, ignored);
  });
  if (server.metrics)
    server.metrics->counter("inferd_http_connections_refused_total", "Connections refused at the open-connection limit.")
        .inc();
}

std::size_t open_connections(ServerState& server) {
  std::lock_guard lock(server.sessions_mu);
  return server.sessions.size();
}

std::pair<std::size_t, std::size_t> connection_counts(ServerState& server) {
  std::lock_guard lock(server.sessions_mu);
  return {server.sessions.size(), std::max(server.sessions_peak, server.sessions.size())};
}

void reset_connection_peak(ServerState& server) {
  std::lock_guard lock(server.sessions_mu);
  server.sessions_peak = server.sessions.size();
}

void close_sessions(ServerState& server) {
  std::vector<std::shared_ptr<Session>> live;
  {
    std::lock_guard lock(server.sessions_mu);
    for (auto& [ptr, weak] : server.sessions)
      if (auto session = weak.lock()) live.push_back(std::move(session));
  }
  for (auto& session : live) session->shut_down();
}

std::string endpoint_text(const std::string& host, uint16_t port) {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

}  // namespace inferd::daemon
