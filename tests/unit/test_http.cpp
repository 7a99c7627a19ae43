// HttpServer and the health routes over real loopback sockets, driven by a raw
// client so the tests see exactly what goes over the wire.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>

#include "daemon/health_routes.hpp"
#include "daemon/http_server.hpp"
#include "daemon/json_error.hpp"
#include "daemon/lifecycle.hpp"
#include "daemon/metrics.hpp"

using namespace inferd::daemon;
using namespace std::chrono_literals;
namespace http = boost::beast::http;
using Clock = std::chrono::steady_clock;

namespace {

struct Reply {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? std::string() : it->second;
  }
  boost::json::object json() const { return boost::json::parse(body).as_object(); }
};

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// One client connection on 127.0.0.1; every read is bounded by a deadline.
class Conn {
 public:
  explicit Conn(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  }
  ~Conn() { close(); }
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;

  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  bool send(std::string_view data) {
    while (!data.empty()) {
      const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  // Reads until `n` bytes are buffered; false on EOF, error or deadline.
  bool fill(size_t n, std::chrono::milliseconds timeout = 5s) {
    const auto deadline = Clock::now() + timeout;
    while (buf_.size() < n)
      if (receive(deadline) != Received::Data) return false;
    return true;
  }

  // Reads until `delim` is buffered and returns everything up to and including it.
  std::optional<std::string> read_until(std::string_view delim, std::chrono::milliseconds timeout = 5s) {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      if (auto pos = buf_.find(delim); pos != std::string::npos) {
        std::string out = buf_.substr(0, pos + delim.size());
        buf_.erase(0, pos + delim.size());
        return out;
      }
      if (receive(deadline) != Received::Data) return std::nullopt;
    }
  }

  // The status line and headers of the next response.
  std::optional<Reply> read_head(std::chrono::milliseconds timeout = 5s) {
    auto head = read_until("\r\n\r\n", timeout);
    if (!head) return std::nullopt;
    Reply r;
    r.status = std::stoi(head->substr(9, 3));
    size_t pos = head->find("\r\n") + 2;
    while (pos < head->size() - 2) {
      const size_t eol = head->find("\r\n", pos);
      const std::string line = head->substr(pos, eol - pos);
      const size_t colon = line.find(':');
      r.headers[lower(line.substr(0, colon))] = line.substr(line.find_first_not_of(' ', colon + 1));
      pos = eol + 2;
    }
    return r;
  }

  // One chunk of a chunked body; empty at the terminating chunk.
  std::optional<std::string> read_chunk(std::chrono::milliseconds timeout = 5s) {
    auto size_line = read_until("\r\n", timeout);
    if (!size_line) return std::nullopt;
    const size_t size = std::stoul(*size_line, nullptr, 16);
    if (!fill(size + 2, timeout)) return std::nullopt;
    std::string data = buf_.substr(0, size);
    buf_.erase(0, size + 2);
    return data;
  }

  std::optional<Reply> read_response(std::chrono::milliseconds timeout = 5s) {
    auto r = read_head(timeout);
    if (!r) return std::nullopt;
    if (r->header("transfer-encoding") == "chunked") {
      for (;;) {
        auto c = read_chunk(timeout);
        if (!c) return std::nullopt;
        if (c->empty()) break;
        r->body += *c;
      }
    } else {
      const size_t len = std::stoul(r->header("content-length"));
      if (!fill(len, timeout)) return std::nullopt;
      r->body = buf_.substr(0, len);
      buf_.erase(0, len);
    }
    return r;
  }

  // Feeds the next response to Beast's parser, a strict client: chunk framing, the
  // end of a body (a zero chunk, Content-Length or EOF). False on a parse error,
  // an incomplete response or the deadline.
  template <class Parser>
  bool parse(Parser& parser, std::chrono::milliseconds timeout = 5s) {
    const auto deadline = Clock::now() + timeout;
    parser.eager(true);
    while (!parser.is_done()) {
      boost::system::error_code ec;
      buf_.erase(0, parser.put(boost::asio::buffer(buf_), ec));
      if (ec && ec != boost::beast::http::error::need_more) return false;
      if (parser.is_done()) break;
      switch (receive(deadline)) {
        case Received::Data:
          break;
        case Received::Eof:
          parser.put_eof(ec);
          return !ec && parser.is_done();
        case Received::Nothing:
          return false;
      }
    }
    return true;
  }

  // True when the server closes the connection (EOF or reset) within `timeout`;
  // anything it sends first is discarded.
  bool closed_by_peer(std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      if (!wait_readable(deadline)) return false;
      char tmp[4096];
      const ssize_t got = ::recv(fd_, tmp, sizeof tmp, 0);
      if (got <= 0) return true;
    }
  }

 private:
  enum class Received { Data, Eof, Nothing };
  // Appends what arrives before the deadline.
  Received receive(Clock::time_point deadline) {
    if (!wait_readable(deadline)) return Received::Nothing;
    char tmp[16384];
    const ssize_t got = ::recv(fd_, tmp, sizeof tmp, 0);
    if (got == 0) return Received::Eof;
    if (got < 0) return Received::Nothing;
    buf_.append(tmp, static_cast<size_t>(got));
    return Received::Data;
  }

  bool wait_readable(Clock::time_point deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, static_cast<int>(left)) > 0;
  }

  int fd_ = -1;
  std::string buf_;
};

std::string get(std::string_view path, std::string_view extra_headers = "") {
  return "GET " + std::string(path) + " HTTP/1.1\r\nHost: test\r\n" + std::string(extra_headers) + "\r\n";
}

std::string post(std::string_view path, std::string_view body, std::string_view extra_headers = "") {
  return "POST " + std::string(path) + " HTTP/1.1\r\nHost: test\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n" + std::string(extra_headers) + "\r\n" + std::string(body);
}

// One request on a fresh connection.
Reply request(uint16_t port, const std::string& raw) {
  Conn c(port);
  REQUIRE(c.send(raw));
  auto r = c.read_response();
  REQUIRE(r.has_value());
  return *r;
}

HttpServerOptions test_options() {
  HttpServerOptions o;
  o.port = 0;
  o.io_threads = 2;
  o.idle_timeout = 2s;
  o.request_timeout = 5s;
  o.max_body_bytes = 1024;
  return o;
}

// Hands responders from handlers to the test thread, which plays the engine.
class ResponderQueue {
 public:
  // A handler that only queues its responder.
  Handler handler() {
    return [this](const Request&, std::shared_ptr<Responder> r) { push(std::move(r)); };
  }
  void push(std::shared_ptr<Responder> r) {
    std::lock_guard lock(mu_);
    q_.push_back(std::move(r));
    cv_.notify_all();
  }
  // Sends `raw` on `c` and returns the responder its handler queued.
  std::shared_ptr<Responder> request(Conn& c, const std::string& raw) {
    REQUIRE(c.send(raw));
    auto r = pop();
    REQUIRE(r);
    return r;
  }
  std::shared_ptr<Responder> pop(std::chrono::milliseconds timeout = 5s) {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return !q_.empty(); })) return nullptr;
    auto r = std::move(q_.front());
    q_.erase(q_.begin());
    return r;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<Responder>> q_;
};

// A started server with a route whose responders the test thread holds (GET
// /stream) and one that answers at once (GET /x, "1").
struct HeldServer {
  explicit HeldServer(HttpServerOptions options = test_options()) : server(options) {
    server.route("GET", "/stream", pending.handler());
    server.route("GET", "/x", [](const Request&) { return Response::json(200, "1"); });
    server.start();
  }
  ResponderQueue pending;
  HttpServer server;
};

// Waits (bounded) for a condition another thread makes true; the bound is for a
// server that never gets there, generous so that a loaded machine does not trip it.
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds timeout = 10s) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return pred();
}

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos || text.starts_with(line + "\n");
}

}  // namespace

TEST_CASE("http: routes by method and exact path, then by longest prefix") {
  Metrics metrics;
  HttpServer server(test_options(), &metrics);
  server.route("GET", "/hello", [](const Request& req) { return Response::json(200, R"({"hello":"world"})"); });
  server.route("POST", "/hello", [](const Request& req) { return Response::json(201, req.body); });
  server.route_prefix("GET", "/files/", Handler([](const Request& req, std::shared_ptr<Responder> r) {
                        r->send(Response::json(200, "\"short:" + req.path + "\""));
                      }));
  server.route_prefix("GET", "/files/deep/", Handler([](const Request& req, std::shared_ptr<Responder> r) {
                        r->send(Response::json(200, "\"deep:" + req.query + "\""));
                      }));
  server.start();
  const uint16_t port = server.port();
  REQUIRE(port != 0);

  Reply r = request(port, get("/hello"));
  CHECK(r.status == 200);
  CHECK(r.header("content-type") == "application/json");
  CHECK(r.body == R"({"hello":"world"})");
  // A request id is generated when the client sends none...
  CHECK(r.header("x-request-id").size() == 32);
  // ...and the client's own is returned when it sends one.
  CHECK(request(port, get("/hello", "X-Request-Id: abc-123\r\n")).header("x-request-id") == "abc-123");

  r = request(port, post("/hello", R"({"x":1})"));
  CHECK(r.status == 201);
  CHECK(r.body == R"({"x":1})");

  CHECK(request(port, get("/files/a/b")).body == "\"short:/files/a/b\"");
  CHECK(request(port, get("/files/deep/x?n=1")).body == "\"deep:n=1\"");

  r = request(port, get("/nowhere"));
  CHECK(r.status == 404);
  CHECK(r.json().at("error").at("message").as_string() == "no route for /nowhere");
  CHECK(r.json().at("error").at("code").as_int64() == 404);

  r = request(port, "DELETE /hello HTTP/1.1\r\nHost: t\r\n\r\n");
  CHECK(r.status == 405);
  CHECK(r.header("allow") == "GET, POST");
  CHECK(r.json().at("error").at("type").as_string() == "invalid_request_error");

  // A request is counted once its last byte is written: the client may see it first.
  REQUIRE(eventually([&] { return server.in_flight() == 0; }));
  const std::string text = metrics.render();
  CHECK(has_line(text, R"(inferd_http_requests_total{route="/hello",method="GET",code="200"} 2)"));
  CHECK(has_line(text, R"(inferd_http_requests_total{route="/hello",method="POST",code="201"} 1)"));
  CHECK(has_line(text, R"(inferd_http_requests_total{route="/files/deep/*",method="GET",code="200"} 1)"));
  CHECK(has_line(text, R"(inferd_http_requests_total{route="unmatched",method="GET",code="404"} 1)"));
  CHECK(has_line(text, R"(inferd_http_requests_total{route="/hello",method="DELETE",code="405"} 1)"));
  CHECK(has_line(text, R"(inferd_http_request_duration_seconds_count{route="/hello"} 4)"));
  CHECK(has_line(text, R"(inferd_http_request_duration_seconds_bucket{route="/hello",le="+Inf"} 4)"));
  CHECK(has_line(text, "inferd_http_requests_in_flight 0"));
}

TEST_CASE("http: bad input gets a JSON error, never a crash") {
  HttpServer server(test_options());
  server.route("POST", "/json", [](const Request& req) {
    auto body = parse_json_object(req.body);
    return Response::json(200, std::to_string(body.size()));
  });
  server.route("GET", "/teapot", [](const Request&) -> Response { throw HttpError(418, "short and stout", {}, "pot"); });
  server.route("GET", "/boom", [](const Request&) -> Response { throw std::runtime_error("kaboom"); });
  server.start();
  const uint16_t port = server.port();

  SUBCASE("malformed HTTP") {
    for (std::string raw : std::vector<std::string>{"GARBAGE\r\n\r\n", "GET /json HTXP/1.1\r\n\r\n",
                            "POST /json HTTP/1.1\r\nContent-Length: banana\r\n\r\n",
                            std::string("GET /x HTTP/1.1\r\nBad\x01Header: 1\r\n\r\n")}) {
      CAPTURE(raw);
      Conn c(port);
      REQUIRE(c.send(raw));
      auto r = c.read_response();
      REQUIRE(r.has_value());
      CHECK(r->status == 400);
      CHECK(r->header("connection") == "close");
      CHECK(std::string(r->json().at("error").at("message").as_string()).starts_with("malformed HTTP request"));
      CHECK(c.closed_by_peer(3s));
    }
  }
  SUBCASE("malformed JSON") {
    Reply r = request(port, post("/json", "{\"a\": 1,"));
    CHECK(r.status == 400);
    CHECK(std::string(r.json().at("error").at("message").as_string()).starts_with("request body is not valid JSON"));
    CHECK(request(port, post("/json", "[1,2]")).status == 400);
    CHECK(request(port, post("/json", "")).status == 400);
    CHECK(request(port, post("/json", R"({"a":1,"b":2})")).body == "2");
  }
  SUBCASE("handler errors") {
    Reply r = request(port, get("/teapot"));
    CHECK(r.status == 418);
    CHECK(r.json().at("error").at("param").as_string() == "pot");
    r = request(port, get("/boom"));
    CHECK(r.status == 500);
    CHECK(r.json().at("error").at("type").as_string() == "server_error");
  }
  SUBCASE("headers too large") {
    Reply r = request(port, get("/json", "X-Big: " + std::string(20000, 'a') + "\r\n"));
    CHECK(r.status == 431);
  }
  // Still serving after all of it.
  CHECK(request(port, post("/json", "{}")).status == 200);
}

TEST_CASE("http: a body over the limit is 413") {
  Metrics metrics;
  HttpServer server(test_options(), &metrics);  // max_body_bytes = 1024
  server.route("POST", "/echo", [](const Request& req) { return Response::json(200, std::to_string(req.body.size())); });
  server.start();
  const uint16_t port = server.port();

  CHECK(request(port, post("/echo", std::string(1024, 'x'))).body == "1024");

  SUBCASE("announced by Content-Length: answered before the body is sent") {
    Conn c(port);
    REQUIRE(c.send("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 100000000\r\n\r\n"));
    auto r = c.read_response(2s);
    REQUIRE(r.has_value());
    CHECK(r->status == 413);
    CHECK(r->header("connection") == "close");
    CHECK(std::string(r->json().at("error").at("message").as_string()).find("1024 bytes") != std::string::npos);
  }
  SUBCASE("sent whole: the client still reads the answer") {
    Reply r = request(port, post("/echo", std::string(300000, 'x')));
    CHECK(r.status == 413);
  }
  SUBCASE("chunked") {
    Conn c(port);
    std::string raw = "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n";
    for (int i = 0; i < 4; ++i) raw += "200\r\n" + std::string(512, 'y') + "\r\n";
    raw += "0\r\n\r\n";
    REQUIRE(c.send(raw));
    auto r = c.read_response();
    REQUIRE(r.has_value());
    CHECK(r->status == 413);
  }
  REQUIRE(eventually([&] { return server.in_flight() == 0; }));
  CHECK(has_line(metrics.render(), R"(inferd_http_requests_total{route="/echo",method="POST",code="413"} 1)"));
}

TEST_CASE("http: keep-alive serves many requests on one connection, pipelined too") {
  std::mutex mu;
  std::vector<std::string> peers;
  HttpServer server(test_options());
  server.route("GET", "/who", [&](const Request& req) {
    std::lock_guard lock(mu);
    peers.push_back(req.peer);
    return Response::json(200, "\"" + req.peer + "\"");
  });
  server.start();

  Conn c(server.port());
  for (int i = 0; i < 5; ++i) {
    REQUIRE(c.send(get("/who")));
    auto r = c.read_response();
    REQUIRE(r.has_value());
    CHECK(r->status == 200);
    CHECK(r->header("connection") != "close");
  }
  // Three requests in one write: three answers, in order.
  REQUIRE(c.send(get("/who", "X-Request-Id: one\r\n") + get("/who", "X-Request-Id: two\r\n") +
                 get("/who", "X-Request-Id: three\r\n")));
  for (const char* id : {"one", "two", "three"}) {
    auto r = c.read_response();
    REQUIRE(r.has_value());
    CHECK(r->header("x-request-id") == id);
  }
  // "Connection: close" is honoured.
  REQUIRE(c.send(get("/who", "Connection: close\r\n")));
  auto last = c.read_response();
  REQUIRE(last.has_value());
  CHECK(last->header("connection") == "close");
  CHECK(c.closed_by_peer(3s));

  std::lock_guard lock(mu);
  REQUIRE(peers.size() == 9);
  for (const auto& p : peers) CHECK(p == peers.front());  // one connection throughout
  CHECK(peers.front().starts_with("127.0.0.1:"));
}

TEST_CASE("http: 32 concurrent clients are served in parallel") {
  constexpr int kClients = 32;
  // Each request is answered from another thread, as the engine would, and only
  // once every client's request has reached its handler: a server that served
  // them one at a time would never see them all. The wait is bounded, so such a
  // server fails the test instead of hanging it; no wall-clock bound, so a
  // loaded machine only makes it slower.
  static constexpr auto kAllIn = 60s;
  std::mutex mu;
  std::condition_variable all_in;
  int arrived = 0;
  std::atomic<int> answered_together{0};
  std::vector<std::thread> workers;
  HttpServerOptions o = test_options();
  o.request_timeout = kAllIn;
  o.idle_timeout = kAllIn;
  HttpServer server(o);
  server.route("GET", "/slow", Handler([&](const Request& req, std::shared_ptr<Responder> r) {
                 std::lock_guard lock(mu);
                 ++arrived;
                 all_in.notify_all();
                 workers.emplace_back([&, r, id = req.request_id] {
                   std::unique_lock wait_lock(mu);
                   if (all_in.wait_for(wait_lock, kAllIn, [&] { return arrived == kClients; })) ++answered_together;
                   wait_lock.unlock();
                   r->send(Response::json(200, "\"" + id + "\""));
                 });
               }));
  server.route("GET", "/fast", [](const Request&) { return Response::json(200, "1"); });
  server.start();
  const uint16_t port = server.port();

  std::atomic<int> ok{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&, i] {
      Conn c(port);
      const std::string id = "client-" + std::to_string(i);
      if (!c.send(get("/slow", "X-Request-Id: " + id + "\r\n"))) return;
      auto r = c.read_response(kAllIn + 5s);
      if (!r || r->status != 200 || r->body != "\"" + id + "\"") return;
      for (int k = 0; k < 5; ++k) {
        if (!c.send(get("/fast"))) return;
        auto f = c.read_response();
        if (!f || f->status != 200) return;
      }
      ++ok;
    });
  }
  for (auto& t : clients) t.join();
  std::vector<std::thread> started;
  {
    std::lock_guard lock(mu);  // the workers take it too: join them outside it
    started.swap(workers);
  }
  for (auto& w : started) w.join();
  CHECK(ok == kClients);
  CHECK(answered_together == kClients);  // all 32 were in flight at once
  CHECK(eventually([&] { return server.in_flight() == 0; }));
}

TEST_CASE("http: slow or silent clients are closed after the idle timeout") {
  HttpServerOptions o = test_options();
  o.idle_timeout = 300ms;
  HttpServer server(o);
  server.route("GET", "/x", [](const Request&) { return Response::json(200, "1"); });
  server.start();
  const uint16_t port = server.port();

  SUBCASE("half a header, then nothing") {
    Conn c(port);
    REQUIRE(c.send("GET /x HTTP/1.1\r\nHost: t\r\nX-Slow: "));
    const auto t0 = Clock::now();
    CHECK(c.closed_by_peer(3s));
    CHECK(Clock::now() - t0 >= 250ms);
  }
  SUBCASE("nothing at all") {
    Conn c(port);
    CHECK(c.closed_by_peer(3s));
  }
  SUBCASE("a trickle that never finishes the header") {
    Conn c(port);
    const auto t0 = Clock::now();
    bool closed = false;
    // One byte every 50 ms keeps the socket busy but the request never completes.
    for (int i = 0; i < 60 && !closed; ++i) {
      if (!c.send("X")) closed = true;
      else closed = c.closed_by_peer(50ms);
    }
    CHECK(closed);
    CHECK(Clock::now() - t0 < 2s);
  }
  SUBCASE("idle between keep-alive requests") {
    Conn c(port);
    REQUIRE(c.send(get("/x")));
    REQUIRE(c.read_response().has_value());
    CHECK(c.closed_by_peer(3s));
  }
  // The server itself is fine.
  CHECK(request(port, get("/x")).status == 200);
}

TEST_CASE("http: streaming from another thread, then the connection is reused") {
  HeldServer held;
  HttpServer& server = held.server;
  Conn c(server.port());
  auto r = held.pending.request(c, get("/stream", "X-Request-Id: s1\r\n"));
  CHECK(server.in_flight() == 1);

  Response head;
  head.content_type = "text/event-stream";
  head.headers.emplace_back("Cache-Control", "no-cache");
  r->start_stream(std::move(head));
  auto h = c.read_head();
  REQUIRE(h.has_value());
  CHECK(h->status == 200);
  CHECK(h->header("content-type") == "text/event-stream");
  CHECK(h->header("transfer-encoding") == "chunked");
  CHECK(h->header("cache-control") == "no-cache");
  CHECK(h->header("x-request-id") == "s1");

  // Each event arrives before the next is written: nothing is held back.
  for (int i = 0; i < 3; ++i) {
    const std::string event = "data: {\"n\":" + std::to_string(i) + "}\n\n";
    r->write(event);
    CHECK(c.read_chunk() == event);
  }
  r->write("");  // ignored: an empty chunk would end the stream
  r->write("data: [DONE]\n\n");
  r->end();
  r->write("too late\n");  // ignored
  CHECK(c.read_chunk() == "data: [DONE]\n\n");
  CHECK(c.read_chunk() == "");
  CHECK(eventually([&] { return server.in_flight() == 0; }));
  CHECK(r->closed());

  REQUIRE(c.send(get("/x")));
  auto next = c.read_response();
  REQUIRE(next.has_value());
  CHECK(next->body == "1");
}

TEST_CASE("http: a client that hangs up is seen by the producer") {
  Metrics metrics;
  ResponderQueue pending;
  HttpServer server(test_options(), &metrics);
  server.route("GET", "/stream", pending.handler());
  server.start();

  for (bool started : {true, false}) {
    CAPTURE(started);
    Conn c(server.port());
    auto r = pending.request(c, get("/stream"));
    std::atomic<int> calls{0};
    r->on_disconnect([&] { ++calls; });
    if (started) {
      r->start_stream(Response{200, "text/event-stream", "data: first\n\n", {}});
      REQUIRE(c.read_head().has_value());
      CHECK(c.read_chunk() == "data: first\n\n");
    }
    CHECK_FALSE(r->closed());
    c.close();
    CHECK(eventually([&] { return calls.load() == 1; }));
    CHECK(r->closed());
    // Registered after the fact: runs at once.
    bool late = false;
    r->on_disconnect([&] { late = true; });
    CHECK(late);
    // Output after the disconnect is dropped quietly.
    r->write("data: lost\n\n");
    r->send(Response::json(200, "{}"));
    r->end();
    CHECK(eventually([&] { return server.in_flight() == 0; }));
    CHECK(calls == 1);
  }
  const std::string text = metrics.render();
  CHECK(has_line(text, R"(inferd_http_requests_total{route="/stream",method="GET",code="200"} 1)"));
  CHECK(has_line(text, R"(inferd_http_requests_total{route="/stream",method="GET",code="499"} 1)"));
}

TEST_CASE("http: the request timeout answers 504 and cancels the work") {
  HttpServerOptions o = test_options();
  o.request_timeout = 300ms;
  ResponderQueue pending;
  HttpServer server(o);
  server.route("GET", "/never", pending.handler());
  server.start();

  Conn c(server.port());
  const auto t0 = Clock::now();
  auto r = pending.request(c, get("/never"));
  std::atomic<bool> cancelled{false};
  r->on_disconnect([&] { cancelled = true; });
  auto reply = c.read_response(3s);
  REQUIRE(reply.has_value());
  CHECK(reply->status == 504);
  CHECK(Clock::now() - t0 >= 250ms);
  CHECK(cancelled);
  CHECK(r->closed());
  CHECK(c.closed_by_peer(3s));
}

TEST_CASE("http: a responder dropped without an answer is a 500") {
  HttpServer server(test_options());
  server.route("GET", "/forgetful", Handler([](const Request&, std::shared_ptr<Responder>) {}));
  server.start();
  Reply r = request(server.port(), get("/forgetful"));
  CHECK(r.status == 500);
  CHECK(r.json().at("error").at("message").as_string() == "the handler produced no response");
}

TEST_CASE("http: draining refuses new work but finishes what is in flight") {
  ResponderQueue pending;
  HttpServer server(test_options());
  server.route("GET", "/work", pending.handler());
  server.route("GET", "/health", [](const Request&) { return Response::json(200, "1"); },
               RouteOptions{.available_while_draining = true});
  server.start();
  const uint16_t port = server.port();

  Conn busy(port);
  auto r = pending.request(busy, get("/work"));

  server.set_accepting(false);
  CHECK_FALSE(server.accepting());
  Reply refused = request(port, get("/work"));
  CHECK(refused.status == 503);
  CHECK(refused.header("retry-after") == "5");
  CHECK(refused.header("connection") == "close");
  CHECK(request(port, get("/health")).status == 200);

  CHECK(eventually([&] { return server.in_flight() == 1; }));
  r->send(Response::json(200, "\"done\""));
  auto done = busy.read_response();
  REQUIRE(done.has_value());
  CHECK(done->body == "\"done\"");
  CHECK(done->header("connection") == "close");  // keep-alive ends while draining
  CHECK(eventually([&] { return server.in_flight() == 0; }));

  server.set_accepting(true);
  CHECK(pending.pop(0ms) == nullptr);
}

TEST_CASE("http: stop() closes connections and tells pending work") {
  ResponderQueue pending;
  auto server = std::make_unique<HttpServer>(test_options());
  server->route("GET", "/work", pending.handler());
  server->start();

  Conn c(server->port());
  auto r = pending.request(c, get("/work"));
  std::atomic<bool> told{false};
  r->on_disconnect([&] { told = true; });

  server->stop();
  CHECK(told);
  CHECK(r->closed());
  CHECK(server->in_flight() == 0);
  CHECK(c.closed_by_peer(3s));
  server->stop();  // idempotent
  server.reset();
  // The responder outlives the server: its calls do nothing, and dropping it is safe.
  r->write("data: x\n\n");
  r->send(Response::json(200, "{}"));
  r.reset();
}

TEST_CASE("http: a stream read by a strict client: one chunk per write, then the zero chunk") {
  HeldServer held;
  Conn c(held.server.port());
  auto r = held.pending.request(c, get("/stream"));
  // The middle event is larger than a socket write, so it crosses reads.
  const std::vector<std::string> events = {"data: {\"n\":0}\n\n", "data: " + std::string(300000, 'x') + "\n\n",
                                           "data: [DONE]\n\n"};
  r->start_stream(Response{200, "text/event-stream", events[0], {{"Cache-Control", "no-cache"}}});
  r->write(events[1]);
  r->write(events[2]);
  r->end();

  http::response_parser<http::string_body> parser;
  std::vector<uint64_t> chunk_sizes;
  std::string body;
  // Beast keeps references to the callbacks.
  auto on_chunk_header = [&](uint64_t size, boost::beast::string_view, boost::system::error_code&) {
    chunk_sizes.push_back(size);
  };
  auto on_chunk_body = [&](uint64_t, boost::beast::string_view data, boost::system::error_code&) {
    body.append(data);
    return data.size();
  };
  parser.on_chunk_header(on_chunk_header);
  parser.on_chunk_body(on_chunk_body);
  REQUIRE(c.parse(parser));
  const auto& msg = parser.get();
  CHECK(msg.result_int() == 200);
  CHECK(msg.version() == 11);
  CHECK(msg.chunked());
  CHECK(msg.keep_alive());
  CHECK(msg[http::field::content_type] == "text/event-stream");
  CHECK(msg[http::field::cache_control] == "no-cache");
  CHECK(chunk_sizes == std::vector<uint64_t>{events[0].size(), events[1].size(), events[2].size(), 0});
  CHECK(body == events[0] + events[1] + events[2]);

  // Nothing follows the zero chunk but the next response.
  REQUIRE(c.send(get("/x")));
  http::response_parser<http::string_body> next;
  REQUIRE(c.parse(next));
  CHECK(next.get().body() == "1");
}

TEST_CASE("http: a request pipelined behind a pending response waits its turn") {
  HeldServer held;
  Conn c(held.server.port());
  auto r = held.pending.request(c, get("/stream", "X-Request-Id: first\r\n"));
  // Arrives while the server watches the connection for a hang-up.
  REQUIRE(c.send(get("/x", "X-Request-Id: second\r\n")));
  CHECK_FALSE(c.read_head(300ms).has_value());
  CHECK_FALSE(r->closed());

  r->send(Response::json(200, "\"done\""));
  for (const char* id : {"first", "second"}) {
    auto reply = c.read_response();
    REQUIRE(reply.has_value());
    CHECK(reply->header("x-request-id") == id);
  }
  CHECK(eventually([&] { return held.server.in_flight() == 0; }));
}

TEST_CASE("http: Expect: 100-continue is answered before the body is sent") {
  HttpServer server(test_options());  // max_body_bytes = 1024
  server.route("POST", "/echo", [](const Request& req) { return Response::json(200, req.body); });
  server.start();

  Conn c(server.port());
  REQUIRE(c.send("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n"));
  CHECK(c.read_until("\r\n\r\n") == "HTTP/1.1 100 Continue\r\n\r\n");
  REQUIRE(c.send("\"hi\""));
  auto r = c.read_response();
  REQUIRE(r.has_value());
  CHECK(r->status == 200);
  CHECK(r->body == "\"hi\"");

  // Over the limit: refused at once, no 100.
  Conn big(server.port());
  REQUIRE(big.send("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5000\r\nExpect: 100-continue\r\n\r\n"));
  auto refused = big.read_response();
  REQUIRE(refused.has_value());
  CHECK(refused->status == 413);
}

TEST_CASE("http: HTTP/1.0 clients get HTTP/1.0 answers; their streams end with the connection") {
  HeldServer held;
  const uint16_t port = held.server.port();

  SUBCASE("one answer, then closed") {
    Conn c(port);
    REQUIRE(c.send("GET /x HTTP/1.0\r\n\r\n"));
    http::response_parser<http::string_body> p;
    REQUIRE(c.parse(p));
    CHECK(p.get().version() == 10);
    CHECK_FALSE(p.get().keep_alive());
    CHECK(p.get().body() == "1");
    CHECK(c.closed_by_peer(3s));
  }
  SUBCASE("kept alive when asked") {
    Conn c(port);
    for (int i = 0; i < 2; ++i) {
      REQUIRE(c.send("GET /x HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
      http::response_parser<http::string_body> p;
      REQUIRE(c.parse(p));
      CHECK(p.get().version() == 10);
      CHECK(p.get().keep_alive());
    }
  }
  SUBCASE("a stream: no chunks, closed at its end") {
    Conn c(port);
    auto r = held.pending.request(c, "GET /stream HTTP/1.0\r\n\r\n");
    r->start_stream(Response{200, "text/event-stream", "data: a\n\n", {}});
    r->write("data: b\n\n");
    r->end();
    http::response_parser<http::string_body> p;
    REQUIRE(c.parse(p));  // the body ends at EOF
    CHECK(p.get().version() == 10);
    CHECK_FALSE(p.get().chunked());
    CHECK_FALSE(p.get().has_content_length());
    CHECK(p.get().body() == "data: a\n\ndata: b\n\n");
  }
}

TEST_CASE("http: a handler's headers cannot split the response or replace the server's own") {
  HttpServer server(test_options());
  server.route("GET", "/h", [](const Request&) {
    Response r = Response::json(200, "{}");
    r.content_type = "text/plain\r\nX-Injected: yes";
    r.headers = {{"X-Note", "a\r\nX-Injected: yes"},
                 {"X-Split\nInjected", "yes"},
                 {"Content-Length", "999"},
                 {"Connection", "close"},
                 {"X-Request-Id", "forged"}};
    return r;
  });
  server.start();

  Conn c(server.port());
  for (int i = 0; i < 2; ++i) {  // the connection stays usable
    REQUIRE(c.send(get("/h", "X-Request-Id: mine\r\n")));
    auto r = c.read_response();
    REQUIRE(r.has_value());
    CHECK(r->status == 200);
    CHECK(r->header("x-injected") == "");
    CHECK(r->header("injected") == "");
    CHECK(r->header("x-note") == "a  X-Injected: yes");
    CHECK(r->header("content-type") == "text/plain  X-Injected: yes");
    CHECK(r->header("content-length") == "2");
    CHECK(r->header("connection") == "");
    CHECK(r->header("x-request-id") == "mine");
    CHECK(r->body == "{}");
  }
}

TEST_CASE("http: a handler's impossible status or body is corrected, not fatal") {
  HttpServer server(test_options());
  server.route("GET", "/empty", [](const Request&) { return Response::json(204, "\"dropped\""); });
  server.route("GET", "/nonsense", [](const Request&) { return Response::json(-1, "{}"); });
  server.start();

  Conn c(server.port());
  for (int i = 0; i < 2; ++i) {  // the connection and the I/O threads live on
    REQUIRE(c.send(get("/empty")));
    auto r = c.read_response();
    REQUIRE(r.has_value());
    CHECK(r->status == 204);
    CHECK(r->body == "");
    REQUIRE(c.send(get("/nonsense")));
    r = c.read_response();
    REQUIRE(r.has_value());
    CHECK(r->status == 500);
  }
}

TEST_CASE("http: a stream past the request timeout, or stalled by a client that reads nothing, ends") {
  for (bool stalled : {false, true}) {
    CAPTURE(stalled);
    HttpServerOptions o = test_options();
    // One timeout at a time: the other is out of reach.
    o.request_timeout = stalled ? 60s : 300ms;
    o.idle_timeout = stalled ? 300ms : 60s;
    HeldServer held(o);
    Conn c(held.server.port());
    auto r = held.pending.request(c, get("/stream"));
    std::atomic<bool> told{false};
    r->on_disconnect([&] { told = true; });
    r->start_stream(Response{200, "text/event-stream", "data: first\n\n", {}});
    auto h = c.read_head();
    REQUIRE(h.has_value());
    CHECK(h->header("connection") == "");  // chosen before the end was known
    CHECK(c.read_chunk() == "data: first\n\n");
    if (stalled) {
      // Once the socket buffers are full the writes stall.
      const std::string block(1 << 20, 'x');
      for (int i = 0; i < 64 && !r->closed(); ++i) {
        r->write(block);
        std::this_thread::sleep_for(20ms);
      }
    } else {
      // Timed out: the stream still ends properly, then the connection closes.
      CHECK(c.read_chunk(3s) == "");
      CHECK(c.closed_by_peer(3s));
    }
    CHECK(eventually([&] { return told.load(); }));
    CHECK(r->closed());
    CHECK(eventually([&] { return held.server.in_flight() == 0; }));
  }
}

TEST_CASE("http: the admin listener serves only the routes registered for it") {
  HttpServerOptions o = test_options();
  o.admin_port = 0;
  HttpServer server(o);
  auto where = [](const Request& req) { return Response::json(200, req.admin_listener ? "\"admin\"" : "\"main\""); };
  server.route("GET", "/api", where);
  server.route("POST", "/api", where);
  server.route("GET", "/ops", where, RouteOptions{.listeners = Listeners::Admin});
  server.route("GET", "/both", where, RouteOptions{.listeners = Listeners::Both});
  server.start();
  const uint16_t main = server.port(), admin = server.admin_port();
  REQUIRE(admin != 0);
  REQUIRE(admin != main);
  CHECK(request(main, get("/api")).body == "\"main\"");
  CHECK(request(main, get("/both")).body == "\"main\"");
  CHECK(request(main, get("/ops")).status == 404);
  CHECK(request(admin, get("/ops")).body == "\"admin\"");
  CHECK(request(admin, get("/both")).body == "\"admin\"");
  // Not "405 Allow: GET, POST": the path is not served here at all.
  CHECK(request(admin, get("/api")).status == 404);
  CHECK(request(admin, "DELETE /api HTTP/1.1\r\nHost: t\r\n\r\n").status == 404);
  CHECK(request(admin, "DELETE /ops HTTP/1.1\r\nHost: t\r\n\r\n").header("allow") == "GET");
}

TEST_CASE("http: offloaded handlers run off the I/O threads, so a busy one holds up nobody else") {
  HttpServerOptions o = test_options();
  o.io_threads = 1;
  o.work_threads = 2;
  HttpServer server(o);
  std::mutex mu;
  std::condition_variable cv;
  int busy = 0;
  bool release = false;
  // Holds its thread until released (bounded), as tokenizing megabytes or a probe would.
  auto slow = [&](const Request&) {
    std::unique_lock lock(mu);
    ++busy;
    cv.notify_all();
    cv.wait_for(lock, 30s, [&] { return release; });
    return Response::json(200, "\"slow\"");
  };
  server.route("POST", "/slow", slow, RouteOptions{.offload = true});
  server.route("GET", "/quick", [](const Request&) { return Response::json(200, "\"quick\""); });
  server.start();
  std::vector<std::thread> clients;
  std::vector<Reply> slow_replies(2);
  for (int i = 0; i < 2; ++i)
    clients.emplace_back([&, i] { slow_replies[i] = request(server.port(), post("/slow", "{}")); });
  {
    std::unique_lock lock(mu);
    REQUIRE(cv.wait_for(lock, 30s, [&] { return busy == 2; }));
  }
  // Both slow handlers hold their threads; the only I/O thread still answers.
  const Reply quick = request(server.port(), get("/quick"));
  CHECK(quick.status == 200);
  CHECK(quick.body == "\"quick\"");
  {
    std::lock_guard lock(mu);
    release = true;
  }
  cv.notify_all();
  for (auto& c : clients) c.join();
  for (const auto& r : slow_replies) CHECK(r.body == "\"slow\"");
}

TEST_CASE("http: a health probe on the main listener is answered while every I/O thread is busy") {
  HttpServerOptions o = test_options();
  o.io_threads = 1;
  HttpServer server(o);
  std::mutex mu;
  std::condition_variable cv;
  bool busy = false, release = false;
  // Holds the only I/O thread until released (bounded), as a burst of
  // thousands of connections opening or timing out together would.
  server.route("GET", "/hold", [&](const Request&) {
    std::unique_lock lock(mu);
    busy = true;
    cv.notify_all();
    cv.wait_for(lock, 30s, [&] { return release; });
    return Response::json(200, "\"held\"");
  });
  server.route("GET", "/health/live", [](const Request&) { return Response::json(200, "\"alive\""); });
  server.start();
  Reply held;
  std::thread client([&] { held = request(server.port(), get("/hold")); });
  {
    std::unique_lock lock(mu);
    REQUIRE(cv.wait_for(lock, 30s, [&] { return busy; }));
  }
  const Reply probe = request(server.port(), get("/health/live"));
  CHECK(probe.status == 200);
  CHECK(probe.body == "\"alive\"");
  CHECK(probe.header("connection") == "close");  // served once, off the I/O threads
  {
    std::lock_guard lock(mu);
    release = true;
  }
  cv.notify_all();
  client.join();
  CHECK(held.body == "\"held\"");
  // Pipelined after a health request, or a health route's prefix only: the I/O threads serve it.
  Conn c(server.port());
  REQUIRE(c.send(get("/health/live") + get("/hold")));
  REQUIRE(c.read_response()->status == 200);
  CHECK(c.read_response()->body == "\"held\"");
}

TEST_CASE("http: connections over the limit get 503 with Retry-After; the admin listener is never refused") {
  HttpServerOptions o = test_options();
  o.max_connections = 2;
  o.admin_port = 0;
  o.idle_timeout = 60s;  // the two open connections stay open while the test runs
  Metrics metrics;
  HttpServer server(o, &metrics);
  server.route("GET", "/x", [](const Request&) { return Response::json(200, "1"); },
               RouteOptions{.listeners = Listeners::Both});
  server.route("GET", "/health/live", [](const Request&) { return Response::json(200, "\"alive\""); });
  server.start();
  auto idle = std::make_unique<Conn>(server.port());
  Conn second(server.port());
  // Both are open (and counted) once they have been answered once.
  REQUIRE(idle->send(get("/x")));
  REQUIRE(idle->read_response()->status == 200);
  REQUIRE(second.send(get("/x")));
  REQUIRE(second.read_response()->status == 200);
  const Reply refused = request(server.port(), get("/x"));
  CHECK(refused.status == 503);
  CHECK(refused.header("retry-after") == "1");
  CHECK(refused.json().at("error").at("message").as_string().starts_with("too many open connections (2)"));
  CHECK(request(server.admin_port(), get("/x")).status == 200);
  // A health probe is answered over the limit too, and its connection closed:
  // a liveness check must not fail because clients hold every connection.
  const Reply probe = request(server.port(), get("/health/live"));
  CHECK(probe.status == 200);
  CHECK(probe.header("connection") == "close");
  CHECK(metrics.render().find("inferd_http_connections_refused_total 1") != std::string::npos);
  // One closes: a new connection is served again.
  idle.reset();
  CHECK(eventually([&] { return request(server.port(), get("/x")).status == 200; }, 10s));
}

TEST_CASE("http: a busy port is a clear error") {
  HttpServer first(test_options());
  first.start();
  HttpServerOptions o = test_options();
  o.port = first.port();
  HttpServer second(o);
  CHECK_THROWS_WITH_AS(second.start(),
                       ("cannot listen on 127.0.0.1:" + std::to_string(o.port) + ": Address already in use").c_str(),
                       std::runtime_error);
  HttpServerOptions bad = test_options();
  bad.host = "no-such-host.invalid";
  HttpServer third(bad);
  CHECK_THROWS_AS(third.start(), std::runtime_error);
}

TEST_CASE("health: ready follows the lifecycle; live, metrics and models answer") {
  Lifecycle lifecycle;
  Metrics metrics;
  ServedModel model;
  HttpServer server(test_options(), &metrics);
  register_health_routes(server, lifecycle, metrics, model);
  server.start();
  const uint16_t port = server.port();

  Reply r = request(port, get("/health/live"));
  CHECK(r.status == 200);
  CHECK(r.json().at("status").as_string() == "alive");

  r = request(port, get("/health/ready"));
  CHECK(r.status == 503);
  CHECK(r.header("retry-after") == "5");
  CHECK(r.json().at("state").as_string() == "Starting");
  CHECK(r.json().at("phase").as_string() == "");
  CHECK(r.json().at("error").at("code").as_int64() == 503);

  REQUIRE(lifecycle.transition(State::Loading, "test"));
  REQUIRE(lifecycle.transition(State::Warming, "test"));
  lifecycle.set_activity("warming 2/4 burst 0/4 requests");
  r = request(port, get("/health/ready"));
  CHECK(r.status == 503);
  CHECK(r.json().at("state").as_string() == "Warming");
  CHECK(r.json().at("activity").as_string() == "warming 2/4 burst 0/4 requests");
  CHECK(r.json().at("phase").as_string() == "warming 2/4 burst 0/4 requests");  // the old name
  CHECK(std::string(r.json().at("error").at("message").as_string()).find("Warming (warming 2/4 burst 0/4 requests)") != std::string::npos);

  // No model yet: an empty list.
  r = request(port, get("/v1/models"));
  CHECK(r.status == 200);
  CHECK(r.json().at("object").as_string() == "list");
  CHECK(r.json().at("data").as_array().empty());
  model.set(ModelInfo{"smol", "/models/smol.gguf", 8192, 1700000000});

  REQUIRE(lifecycle.transition(State::Serving, "test"));
  r = request(port, get("/health/ready"));
  CHECK(r.status == 200);
  CHECK(r.json().at("state").as_string() == "Serving");
  CHECK(r.json().at("phase").as_string() == "");

  r = request(port, get("/v1/models"));
  const boost::json::object models = r.json();
  const auto& m = models.at("data").as_array().at(0).as_object();
  CHECK(m.at("id").as_string() == "smol");
  CHECK(m.at("object").as_string() == "model");
  CHECK(m.at("owned_by").as_string() == "inferd");
  CHECK(m.at("root").as_string() == "/models/smol.gguf");
  CHECK(m.at("max_model_len").as_int64() == 8192);
  CHECK(m.at("created").as_int64() == 1700000000);
  CHECK_FALSE(m.contains("integrity"));  // no check made (a stand-in load)
  model.set_integrity({.status = "no_manifest", .manifest = "", .files = 0, .bytes = 0, .seconds = 0});
  r = request(port, get("/v1/models"));
  CHECK(r.json().at("data").as_array().at(0).as_object().at("integrity").as_object() ==
        boost::json::object{{"status", "no_manifest"}});
  model.set_integrity({.status = "verified", .manifest = "/models/SHA256SUMS", .files = 2, .bytes = 100, .seconds = 0.5});
  r = request(port, get("/v1/models"));
  const boost::json::value verified = r.json().at("data").as_array().at(0).as_object().at("integrity");
  CHECK(verified.as_object().at("status").as_string() == "verified");
  CHECK(verified.as_object().at("manifest").as_string() == "/models/SHA256SUMS");
  CHECK(verified.as_object().at("files").to_number<int>() == 2);
  CHECK(verified.as_object().at("bytes").to_number<int>() == 100);
  CHECK(verified.as_object().at("seconds").as_double() == 0.5);

  REQUIRE(eventually([&] { return server.in_flight() == 0; }));
  r = request(port, get("/metrics"));
  CHECK(r.status == 200);
  CHECK(r.header("content-type") == "text/plain; version=0.0.4; charset=utf-8");
  CHECK(has_line(r.body, R"(inferd_http_requests_total{route="/health/ready",method="GET",code="503"} 2)"));
  CHECK(has_line(r.body, R"(inferd_http_requests_total{route="/health/ready",method="GET",code="200"} 1)"));
  CHECK(r.body.find("# TYPE inferd_http_request_duration_seconds histogram") != std::string::npos);

  // The health routes keep answering while the server drains.
  server.set_accepting(false);
  REQUIRE(lifecycle.transition(State::Draining, "test"));
  r = request(port, get("/health/ready"));
  CHECK(r.status == 503);
  CHECK(r.json().at("state").as_string() == "Draining");
  CHECK(request(port, get("/health/live")).status == 200);
  CHECK(request(port, get("/metrics")).status == 200);
}

TEST_CASE("health: live reports a stalled loop; models honours the API key") {
  Lifecycle lifecycle;
  Metrics metrics;
  ServedModel model;
  std::atomic<bool> loop_ok{true};
  HttpServer server(test_options(), &metrics);
  register_health_routes(server, lifecycle, metrics, model,
                         HealthRouteOptions{.loop_alive = [&] { return loop_ok.load(); }, .api_key = "sekrit"});
  server.start();
  const uint16_t port = server.port();

  CHECK(request(port, get("/health/live")).status == 200);
  loop_ok = false;
  Reply r = request(port, get("/health/live"));
  CHECK(r.status == 503);
  CHECK(r.json().at("status").as_string() == "stalled");

  r = request(port, get("/v1/models"));
  CHECK(r.status == 401);
  CHECK(r.json().at("error").at("type").as_string() == "authentication_error");
  CHECK(request(port, get("/v1/models", "Authorization: Bearer wrong\r\n")).status == 401);
  CHECK(request(port, get("/v1/models", "Authorization: Bearer sekrit\r\n")).status == 200);
}
