// The only translation unit that includes Beast: it compiles slowly, so the rest
// of the daemon sees HttpServer through its pimpl.
//
// One Session per connection, all of its work on one strand. A request is read
// (headers, then body) under the idle deadline, routed, and handed to a handler
// with a Responder. While the response is pending the session keeps reading the
// socket, so a client that hangs up is noticed at once and its work cancelled.
// Responders reach the session only through an Exchange holding a weak pointer
// and a server-wide gate, so a responder kept by another thread can never touch
// a connection, or an io_context, that is gone.
#include "daemon/http_server.hpp"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <shared_mutex>
#include <stdexcept>
#include <thread>
#include <unordered_map>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <spdlog/spdlog.h>

#include "daemon/json_error.hpp"
#include "daemon/logging.hpp"
#include "daemon/metrics.hpp"

namespace inferd::daemon {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
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

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

// Header names and values come from handlers; CR and LF would split the response.
std::string header_safe(std::string_view s) {
  std::string out(s);
  std::replace_if(out.begin(), out.end(), [](char c) { return c == '\r' || c == '\n'; }, ' ');
  return out;
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

std::string reason_phrase(int status) {
  auto r = http::obsolete_reason(http::int_to_status(static_cast<unsigned>(status)));
  return r == "<unknown-status>" ? std::string("Status") : std::string(r);
}

std::string endpoint_text(const std::string& host, uint16_t port) {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string chunk(std::string_view data) {
  char hex[20];
  auto [end, ec] = std::to_chars(hex, hex + sizeof hex, data.size(), 16);
  std::string out(hex, end);
  out += "\r\n";
  out += data;
  out += "\r\n";
  return out;
}

// Whether the response headers already carry this name (the server must not
// emit its own then) or whether the server owns it outright.
bool server_owned_header(std::string_view name) {
  return iequals(name, "Content-Length") || iequals(name, "Transfer-Encoding") || iequals(name, "Connection") ||
         iequals(name, "X-Request-Id") || iequals(name, "Content-Type");
}

}  // namespace

std::string_view Request::header(std::string_view name) const {
  for (const auto& [n, v] : headers)
    if (iequals(n, name)) return v;
  return {};
}

Response Response::json(int status, std::string body) {
  Response r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

Response Response::error(int status, std::string_view message, std::string_view type) {
  return json(status, error_body(status, message, type));
}

// ---------------------------------------------------------------------------

namespace {

struct Route {
  std::string pattern;  // the metrics label: the path, or the prefix followed by '*'
  Handler handler;
  RouteOptions options;
};

// Responders check it before touching a connection; stop() closes it, after which
// the io_context may go away while responders live on.
struct Gate {
  std::shared_mutex mu;
  bool open = true;
};

class Session;

// What a request's Responder shares with its Session.
struct Exchange {
  std::shared_ptr<Gate> gate;
  std::weak_ptr<Session> session;
  std::atomic<bool> closed{false};

  std::mutex mu;  // guards the two below
  bool disconnected = false;
  std::vector<std::function<void()>> on_disconnect;

  // Marks the client gone and runs the callbacks (once).
  void disconnect() {
    std::vector<std::function<void()>> callbacks;
    {
      std::lock_guard lock(mu);
      if (disconnected || closed.load()) {
        closed = true;
        return;
      }
      disconnected = true;
      closed = true;
      callbacks.swap(on_disconnect);
    }
    for (auto& cb : callbacks) {
      try {
        cb();
      } catch (const std::exception& e) {
        spdlog::warn("http: on_disconnect callback threw: {}", e.what());
      }
    }
  }
  // The response is finished: later output is dropped, callbacks never run.
  void finish() {
    std::lock_guard lock(mu);
    closed = true;
    on_disconnect.clear();
  }
};

// The server's state, shared by its sessions.
struct ServerCore {
  ServerCore(HttpServerOptions o, Metrics* m) : opts(std::move(o)), metrics(m) {
    if (opts.io_threads < 1) opts.io_threads = 1;
    if (opts.request_timeout.count() <= 0) opts.request_timeout = std::chrono::hours(24 * 365);
    if (opts.idle_timeout.count() <= 0) opts.idle_timeout = std::chrono::seconds(60);
    if (metrics) {
      in_flight_gauge = &metrics->gauge("inferd_http_requests_in_flight", "HTTP requests being answered.");
    }
  }

  struct Match {
    const Route* route = nullptr;
    std::string pattern;  // the route's label when the path is known; "unmatched" otherwise
    std::string allow;    // set when the path is known but not for this method
  };
  Match match(std::string_view method, std::string_view path) const;
  void record(const std::string& route, const std::string& method, int status, Clock::time_point started);
  void do_accept();

  HttpServerOptions opts;
  Metrics* metrics;
  Gauge* in_flight_gauge = nullptr;
  std::atomic<bool> accepting{true};
  std::atomic<int> in_flight{0};
  std::shared_ptr<Gate> gate = std::make_shared<Gate>();
  uint16_t bound_port = 0;
  bool started = false;
  bool stopped = false;

  // path -> method -> route
  std::map<std::string, std::map<std::string, Route>, std::less<>> exact;
  // (prefix, method -> route), longest prefix first
  std::vector<std::pair<std::string, std::map<std::string, Route>>> prefixes;

  std::mutex sessions_mu;
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions;

  // Declared last so it is destroyed first: destroying it releases the sessions
  // its pending handlers still own, and they unregister above.
  asio::io_context ioc;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::optional<tcp::acceptor> acceptor;
  std::optional<asio::steady_timer> accept_retry;
  std::vector<std::thread> threads;
};

}  // namespace

struct HttpServer::Impl : ServerCore {
  using ServerCore::ServerCore;
};

// ---------------------------------------------------------------------------

namespace {

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(ServerCore& server, tcp::socket socket)
      : server_(server),
        socket_(std::move(socket)),
        stall_timer_(socket_.get_executor()),
        request_timer_(socket_.get_executor()) {
    error_code ec;
    auto ep = socket_.remote_endpoint(ec);
    if (!ec) peer_ = endpoint_text(ep.address().to_string(), ep.port());
  }

  ~Session() {
    std::lock_guard lock(server_.sessions_mu);
    server_.sessions.erase(this);
  }

  void start() {
    {
      std::lock_guard lock(server_.sessions_mu);
      server_.sessions[this] = weak_from_this();
    }
    read_request();
  }

  // Runs fn on this session's strand if `ex` is still its current exchange.
  template <class Fn>
  static void post(const std::shared_ptr<Exchange>& ex, Fn fn) {
    std::shared_lock lock(ex->gate->mu);
    if (!ex->gate->open) return;
    auto self = ex->session.lock();
    if (!self) return;
    auto executor = self->socket_.get_executor();
    asio::post(executor, [self = std::move(self), ex, fn = std::move(fn)]() mutable {
      if (self->closed_ || self->exchange_ != ex) return;
      fn(*self);
    });
  }

  // Called by stop() once the I/O threads are joined: nothing else runs now.
  void shut_down() { abort("server stopping"); }

  // --- what Responders ask for, on the strand -------------------------------

  void send(Response r) {
    if (phase_ != Phase::Pending) return;
    status_ = r.status;
    queue(head(r, /*stream=*/false) + r.body);
    phase_ = Phase::Finishing;
  }

  void start_stream(Response r) {
    if (phase_ != Phase::Pending) return;
    status_ = r.status;
    // HTTP/1.0 has no chunked encoding: the stream ends when the connection does.
    chunked_ = http_version_ >= 11;
    if (!chunked_) close_after_ = true;
    queue(head(r, /*stream=*/true));
    phase_ = Phase::Streaming;
    if (!r.body.empty()) write(std::move(r.body));
  }

  void write(std::string data) {
    // An empty chunk would end the chunked stream early.
    if (phase_ != Phase::Streaming || data.empty()) return;
    queue(chunked_ ? chunk(data) : std::move(data));
  }

  void end() {
    if (phase_ != Phase::Streaming) return;
    if (chunked_) queue("0\r\n\r\n");
    phase_ = Phase::Finishing;
    maybe_finish();
  }

  void abandoned() {
    if (phase_ == Phase::Pending) send(Response::error(500, "the handler produced no response"));
    else if (phase_ == Phase::Streaming) end();
  }

 private:
  enum class Phase { Idle, Pending, Streaming, Finishing };

  // --- reading a request ------------------------------------------------------

  void read_request() {
    if (closed_) return;
    parser_.emplace();
    parser_->body_limit(server_.opts.max_body_bytes);
    parser_->header_limit(kHeaderLimit);
    arm_stall(server_.opts.idle_timeout);
    http::async_read_header(socket_, buffer_, *parser_,
                            [self = shared_from_this()](error_code ec, size_t) { self->on_header(ec); });
  }

  void on_header(error_code ec) {
    if (closed_) return;
    if (ec) return read_failed(ec);
    const auto& req = parser_->get();
    if (iequals(req[http::field::expect], "100-continue") && !parser_->is_done()) {
      // The client waits for this before it sends the body.
      continue_msg_ = "HTTP/1.1 100 Continue\r\n\r\n";
      asio::async_write(socket_, asio::buffer(continue_msg_), [self = shared_from_this()](error_code ec, size_t) {
        if (self->closed_) return;
        if (ec) return self->abort("write failed");
        self->read_body();
      });
      return;
    }
    read_body();
  }

  void read_body() {
    http::async_read(socket_, buffer_, *parser_,
                     [self = shared_from_this()](error_code ec, size_t) { self->on_body(ec); });
  }

  void on_body(error_code ec) {
    if (closed_) return;
    if (ec) return read_failed(ec);
    cancel_stall();
    dispatch();
  }

  void read_failed(error_code ec) {
    // Beast's own errors mean the bytes were not valid HTTP, except these two:
    // the client closed, between requests or in the middle of one.
    const bool malformed = ec.category() == http::make_error_code(http::error::bad_method).category() &&
                           ec != http::error::end_of_stream && ec != http::error::partial_message;
    if (!malformed) return abort(ec == http::error::end_of_stream ? "" : ec.message());  // closed or reset
    cancel_stall();
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
    std::string path(req.target().substr(0, req.target().find('?')));
    auto m = server_.match(req.method_string(), path);
    begin_exchange(status == 413 ? m.pattern : "unmatched", method_label(req.method_string()));
    send(Response::error(status, message));
  }

  // --- answering ----------------------------------------------------------------

  void dispatch() {
    auto& msg = parser_->get();
    Request req;
    req.method = std::string(msg.method_string());
    req.target = std::string(msg.target());
    const auto q = req.target.find('?');
    req.path = req.target.substr(0, q);
    if (q != std::string::npos) req.query = req.target.substr(q + 1);
    for (const auto& f : msg) req.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
    req.body = std::move(msg.body());
    std::string_view id = req.header("X-Request-Id");
    req.request_id = valid_request_id(id) ? std::string(id) : new_request_id();
    req.peer = peer_;
    req.deadline = Clock::now() + server_.opts.request_timeout;
    request_id_ = req.request_id;
    http_version_ = msg.version();
    keep_alive_ = msg.keep_alive();

    auto m = server_.match(req.method, req.path);
    begin_exchange(m.pattern, method_label(req.method));
    arm_request_timer();
    watch_client();

    if (!m.route) {
      if (m.allow.empty()) return send(Response::error(404, "no route for " + req.path, "not_found_error"));
      Response r = Response::error(405, "method " + req.method + " is not allowed for " + req.path);
      r.headers.emplace_back("Allow", m.allow);
      return send(std::move(r));
    }
    if (!server_.accepting && !m.route->options.available_while_draining) {
      close_after_ = true;
      Response r = Response::error(503, "the server is shutting down and accepts no new requests");
      r.headers.emplace_back("Retry-After", "5");
      return send(std::move(r));
    }

    auto responder = make_responder();
    // Log records written while the handler runs carry the request id.
    ScopedRequestId scoped_id(req.request_id);
    try {
      m.route->handler(req, responder);
    } catch (const HttpError& e) {
      responder->send(Response::json(e.status, error_body(e.status, e.what(), e.type, e.param)));
    } catch (const std::exception& e) {
      spdlog::error("http: {} {} failed: {}", req.method, req.path, e.what());
      responder->send(Response::error(500, std::string("internal error: ") + e.what()));
    }
  }

  std::shared_ptr<Responder> make_responder();

  void begin_exchange(std::string route, std::string method) {
    exchange_ = std::make_shared<Exchange>();
    exchange_->gate = server_.gate;
    exchange_->session = weak_from_this();
    route_ = std::move(route);
    method_ = std::move(method);
    started_ = Clock::now();
    status_ = 0;
    chunked_ = false;
    phase_ = Phase::Pending;
    ++server_.in_flight;
    if (server_.in_flight_gauge) server_.in_flight_gauge->inc();
  }

  // Ends the current exchange exactly once, whichever way it ended.
  void end_exchange(bool client_gone) {
    if (!exchange_) return;
    auto ex = std::move(exchange_);
    exchange_.reset();
    phase_ = Phase::Idle;
    if (client_gone) ex->disconnect();
    else ex->finish();
    cancel_request_timer();
    server_.record(route_, method_, client_gone && status_ == 0 ? kStatusClientGone : status_, started_);
    --server_.in_flight;
    if (server_.in_flight_gauge) server_.in_flight_gauge->dec();
  }

  std::string head(const Response& r, bool stream) {
    std::string h = "HTTP/1." + std::to_string(http_version_ >= 11 ? 1 : 0) + " " + std::to_string(r.status) + " " +
                    reason_phrase(r.status) + "\r\n";
    h += "Content-Type: " + header_safe(r.content_type) + "\r\n";
    if (!stream) h += "Content-Length: " + std::to_string(r.body.size()) + "\r\n";
    else if (chunked_) h += "Transfer-Encoding: chunked\r\n";
    h += "X-Request-Id: " + request_id_ + "\r\n";
    for (const auto& [n, v] : r.headers) {
      if (server_owned_header(n)) continue;
      h += header_safe(n) + ": " + header_safe(v) + "\r\n";
    }
    if (!server_.accepting) close_after_ = true;
    const bool close = close_after_ || !keep_alive_;
    if (close) h += "Connection: close\r\n";
    else if (http_version_ < 11) h += "Connection: keep-alive\r\n";
    h += "\r\n";
    return h;
  }

  // --- writing ------------------------------------------------------------------

  void queue(std::string data) {
    pending_.push_back(std::move(data));
    if (!writing_) flush();
  }

  void flush() {
    writing_now_.clear();
    while (!pending_.empty()) {
      writing_now_.push_back(std::move(pending_.front()));
      pending_.pop_front();
    }
    std::vector<asio::const_buffer> buffers;
    for (const auto& s : writing_now_) buffers.push_back(asio::buffer(s));
    writing_ = true;
    // A client that stops reading stalls the write; do not wait on it forever.
    arm_stall(server_.opts.idle_timeout);
    asio::async_write(socket_, buffers, [self = shared_from_this()](error_code ec, size_t) { self->on_written(ec); });
  }

  void on_written(error_code ec) {
    writing_ = false;
    if (closed_) return;
    if (ec) return abort("client went away");
    cancel_stall();
    if (!pending_.empty()) return flush();
    maybe_finish();
  }

  void maybe_finish() {
    if (phase_ != Phase::Finishing || writing_ || !pending_.empty()) return;
    end_exchange(/*client_gone=*/false);
    if (close_after_ || !keep_alive_) return linger_close();
    if (watching_) {
      // Stop the disconnect watch; its handler reads the next request.
      resume_reading_ = true;
      error_code ignored;
      socket_.cancel(ignored);
    } else {
      read_request();
    }
  }

  // --- watching the client while a response is pending -------------------------

  void watch_client() {
    if (watching_ || closed_) return;
    watching_ = true;
    socket_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](error_code ec, size_t n) {
      self->on_watch(ec, n);
    });
  }

  void on_watch(error_code ec, size_t n) {
    watching_ = false;
    if (closed_) return;
    if (lingering_) {
      // Discarding what the client still sends; its close (or the deadline) ends it.
      if (ec) return abort("");
      buffer_.consume(buffer_.size());
      return watch_client();
    }
    if (!ec) buffer_.commit(n);
    else if (!(ec == asio::error::operation_aborted && resume_reading_)) return abort("client went away");
    if (exchange_) {
      // Bytes of a pipelined request: keep them for later and keep watching.
      if (buffer_.size() < kPipelineBuffer) watch_client();
    } else if (resume_reading_) {
      resume_reading_ = false;
      read_request();
    }
  }

  // Half-closes after the last response and waits briefly for the client's close,
  // so it reads the response instead of a reset.
  void linger_close() {
    lingering_ = true;
    error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
    arm_stall(std::min<std::chrono::milliseconds>(kLinger, server_.opts.idle_timeout));
    buffer_.consume(buffer_.size());
    watch_client();
  }

  // --- deadlines ----------------------------------------------------------------

  void arm_stall(std::chrono::milliseconds after) {
    stall_armed_ = true;
    stall_timer_.expires_after(after);
    stall_timer_.async_wait([self = shared_from_this()](error_code) {
      if (self->closed_ || !self->stall_armed_ || self->stall_timer_.expiry() > Clock::now()) return;
      self->abort(self->lingering_ ? "" : "idle timeout");
    });
  }
  void cancel_stall() {
    stall_armed_ = false;
    stall_timer_.cancel();
  }

  void arm_request_timer() {
    request_armed_ = true;
    request_timer_.expires_after(server_.opts.request_timeout);
    // The pending wait also keeps the session alive while a handler holds its responder.
    request_timer_.async_wait([self = shared_from_this()](error_code) {
      if (self->closed_ || !self->request_armed_ || self->request_timer_.expiry() > Clock::now()) return;
      self->request_timed_out();
    });
  }
  void cancel_request_timer() {
    request_armed_ = false;
    request_timer_.cancel();
  }

  void request_timed_out() {
    request_armed_ = false;
    if (!exchange_) return;
    spdlog::warn("http: request {} ({}) timed out after {} ms", request_id_, route_,
                 server_.opts.request_timeout.count());
    // The work behind it stops; the client learns why if nothing was sent yet.
    exchange_->disconnect();
    close_after_ = true;
    if (phase_ == Phase::Pending) send(Response::error(504, "the request timed out"));
    else if (phase_ == Phase::Streaming) end();
    maybe_finish();
  }

  // Closes the connection now; a pending response counts as a disconnect.
  void abort(std::string_view why) {
    if (closed_) return;
    if (!why.empty()) spdlog::debug("http: closing {}: {}", peer_, why);
    end_exchange(/*client_gone=*/true);
    closed_ = true;
    stall_armed_ = request_armed_ = false;
    stall_timer_.cancel();
    request_timer_.cancel();
    error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
  }

  ServerCore& server_;
  tcp::socket socket_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  asio::steady_timer stall_timer_;
  asio::steady_timer request_timer_;
  std::string peer_;
  std::string continue_msg_;

  bool closed_ = false;
  bool stall_armed_ = false;
  bool request_armed_ = false;
  bool watching_ = false;
  bool resume_reading_ = false;
  bool lingering_ = false;
  bool writing_ = false;
  std::deque<std::string> pending_;
  std::vector<std::string> writing_now_;

  // The current request.
  std::shared_ptr<Exchange> exchange_;
  Phase phase_ = Phase::Idle;
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

class SessionResponder final : public Responder {
 public:
  explicit SessionResponder(std::shared_ptr<Exchange> ex) : ex_(std::move(ex)) {}
  ~SessionResponder() override {
    Session::post(ex_, [](Session& s) { s.abandoned(); });
  }

  void send(Response r) override {
    if (!closed()) Session::post(ex_, [r = std::move(r)](Session& s) mutable { s.send(std::move(r)); });
  }
  void start_stream(Response head) override {
    if (!closed()) Session::post(ex_, [h = std::move(head)](Session& s) mutable { s.start_stream(std::move(h)); });
  }
  void write(std::string data) override {
    if (!closed()) Session::post(ex_, [d = std::move(data)](Session& s) mutable { s.write(std::move(d)); });
  }
  void end() override {
    if (!closed()) Session::post(ex_, [](Session& s) { s.end(); });
  }
  bool closed() const override { return ex_->closed.load(); }
  void on_disconnect(std::function<void()> cb) override {
    {
      std::lock_guard lock(ex_->mu);
      if (!ex_->disconnected) {
        if (!ex_->closed) ex_->on_disconnect.push_back(std::move(cb));
        return;
      }
    }
    cb();
  }

 private:
  std::shared_ptr<Exchange> ex_;
};

std::shared_ptr<Responder> Session::make_responder() { return std::make_shared<SessionResponder>(exchange_); }

}  // namespace

// ---------------------------------------------------------------------------

ServerCore::Match ServerCore::match(std::string_view method, std::string_view path) const {
  Match m{nullptr, "unmatched", {}};
  auto pick = [&](const std::map<std::string, Route>& by_method) {
    m.pattern = by_method.begin()->second.pattern;
    if (auto it = by_method.find(std::string(method)); it != by_method.end()) {
      m.route = &it->second;
    } else {
      for (const auto& [verb, r] : by_method) m.allow += (m.allow.empty() ? "" : ", ") + verb;
    }
  };
  if (auto it = exact.find(path); it != exact.end()) {
    pick(it->second);
    return m;
  }
  for (const auto& [prefix, by_method] : prefixes) {
    if (path.starts_with(prefix)) {
      pick(by_method);
      return m;
    }
  }
  return m;
}

void ServerCore::record(const std::string& route, const std::string& method, int status,
                              Clock::time_point started) {
  const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
  spdlog::debug("http: {} {} -> {} in {:.1f} ms", method, route, status, seconds * 1e3);
  if (!metrics) return;
  metrics
      ->counter("inferd_http_requests_total", "HTTP requests answered, by route, method and status code.",
                {{"route", route}, {"method", method}, {"code", std::to_string(status)}})
      .inc();
  metrics
      ->histogram("inferd_http_request_duration_seconds",
                  "Time from a complete request to the end of its response, by route.", {{"route", route}})
      .observe(seconds);
}

void ServerCore::do_accept() {
  acceptor->async_accept(asio::make_strand(ioc), [this](error_code ec, tcp::socket socket) {
    if (!acceptor->is_open() || ec == asio::error::operation_aborted) return;
    if (ec) {
      // Out of descriptors and the like: back off instead of spinning.
      spdlog::warn("http: accept failed: {}", ec.message());
      accept_retry->expires_after(std::chrono::milliseconds(100));
      accept_retry->async_wait([this](error_code e) {
        if (!e && acceptor->is_open()) do_accept();
      });
      return;
    }
    error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);  // SSE deltas are small and latency-bound
    std::make_shared<Session>(*this, std::move(socket))->start();
    do_accept();
  });
}

HttpServer::HttpServer(HttpServerOptions options, Metrics* metrics)
    : impl_(std::make_unique<Impl>(std::move(options), metrics)) {}

HttpServer::~HttpServer() { stop(); }

void HttpServer::route(std::string method, std::string path, Handler handler, RouteOptions options) {
  if (impl_->started) throw std::logic_error("HttpServer::route after start()");
  if (path.empty() || path[0] != '/') throw std::invalid_argument("route path must start with '/': " + path);
  impl_->exact[path][method] = Route{path, std::move(handler), options};
}

void HttpServer::route(std::string method, std::string path, SimpleHandler handler, RouteOptions options) {
  route(std::move(method), std::move(path),
        Handler([h = std::move(handler)](const Request& req, std::shared_ptr<Responder> responder) {
          responder->send(h(req));
        }),
        options);
}

void HttpServer::route_prefix(std::string method, std::string prefix, Handler handler, RouteOptions options) {
  if (impl_->started) throw std::logic_error("HttpServer::route_prefix after start()");
  if (prefix.empty() || prefix[0] != '/') throw std::invalid_argument("route prefix must start with '/': " + prefix);
  auto& list = impl_->prefixes;
  auto it = std::find_if(list.begin(), list.end(), [&](const auto& p) { return p.first == prefix; });
  if (it == list.end()) {
    list.emplace_back(prefix, std::map<std::string, Route>{});
    it = list.end() - 1;
  }
  it->second[method] = Route{prefix + "*", std::move(handler), options};
  std::stable_sort(list.begin(), list.end(), [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
}

void HttpServer::start() {
  Impl& s = *impl_;
  if (s.started) throw std::logic_error("HttpServer::start called twice");
  const std::string where = endpoint_text(s.opts.host, s.opts.port);
  error_code ec;
  tcp::resolver resolver(s.ioc);
  auto results = resolver.resolve(s.opts.host, std::to_string(s.opts.port),
                                  tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || results.empty())
    throw std::runtime_error("cannot listen on " + where + ": " + (ec ? ec.message() : "host not found"));
  const tcp::endpoint endpoint = results.begin()->endpoint();

  tcp::acceptor acceptor(s.ioc);
  auto fail = [&](error_code e) { throw std::runtime_error("cannot listen on " + where + ": " + e.message()); };
  if (acceptor.open(endpoint.protocol(), ec)) fail(ec);
  if (acceptor.set_option(asio::socket_base::reuse_address(true), ec)) fail(ec);
  if (acceptor.bind(endpoint, ec)) fail(ec);
  if (acceptor.listen(asio::socket_base::max_listen_connections, ec)) fail(ec);
  s.bound_port = acceptor.local_endpoint().port();
  s.acceptor.emplace(std::move(acceptor));
  s.accept_retry.emplace(s.ioc);
  s.started = true;

  s.work.emplace(s.ioc.get_executor());
  s.do_accept();
  for (int i = 0; i < s.opts.io_threads; ++i) s.threads.emplace_back([&s] { s.ioc.run(); });
  spdlog::info("http: listening on {} ({} I/O threads)", endpoint_text(s.opts.host, s.bound_port), s.opts.io_threads);
}

void HttpServer::stop() {
  Impl& s = *impl_;
  if (!s.started || s.stopped) return;
  s.stopped = true;
  s.accepting = false;
  {
    // After this no responder reaches the io_context again.
    std::unique_lock lock(s.gate->mu);
    s.gate->open = false;
  }
  s.ioc.stop();
  for (auto& t : s.threads) t.join();
  s.threads.clear();

  // The I/O threads are gone, so sessions may be touched from here.
  error_code ignored;
  s.acceptor->close(ignored);
  s.accept_retry->cancel();
  std::vector<std::shared_ptr<Session>> live;
  {
    std::lock_guard lock(s.sessions_mu);
    for (auto& [ptr, weak] : s.sessions)
      if (auto sp = weak.lock()) live.push_back(std::move(sp));
  }
  for (auto& session : live) session->shut_down();
  live.clear();
  s.work.reset();
  // Let the aborted operations complete so the sessions they hold are released.
  s.ioc.restart();
  s.ioc.poll();
  spdlog::info("http: stopped");
}

void HttpServer::set_accepting(bool accepting) { impl_->accepting = accepting; }
bool HttpServer::accepting() const { return impl_->accepting; }
int HttpServer::in_flight() const { return impl_->in_flight.load(); }
uint16_t HttpServer::port() const { return impl_->bound_port; }
const HttpServerOptions& HttpServer::options() const { return impl_->opts; }

}  // namespace inferd::daemon
