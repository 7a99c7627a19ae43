// StoreServer and TcpStore over Boost.Asio.
//
// Wire format, both ways: a 4-byte big-endian length, then that many bytes.
//   request: u8 op (set, get, wait) | u32 timeout_ms | u32 key count |
//            per key: u32 length, bytes | u32 value length, bytes (set only)
//   reply:   u8 status (ok, timeout, bad request) | the value (get only)
// The server answers a get or wait when its keys exist or when timeout_ms has
// passed, so a client never polls. One request per connection at a time.
#include "comm/tcp_store.hpp"

#include <array>
#include <atomic>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include "comm/collectives.hpp"

namespace inferd::comm {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

enum Op : uint8_t { kSet = 1, kGet = 2, kWait = 3 };
enum Status : uint8_t { kOk = 0, kTimeout = 1, kBadRequest = 2 };
// Gloo's largest value is a rank's pair addresses (a few KiB per peer).
constexpr uint32_t kMaxFrame = 16u << 20;
constexpr uint32_t kMaxKeys = 4096;
// How long past its own timeout a client waits for the server's answer.
constexpr milliseconds kReplySlack{5000};

struct Request {
  uint8_t op = 0;
  uint32_t timeout_ms = 0;
  std::vector<std::string> keys;
  std::vector<char> value;
};

void put_u32(std::vector<char>& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>((v >> shift) & 0xff));
}

uint32_t get_u32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// A frame: length, then the body.
std::vector<char> frame(const std::vector<char>& body) {
  std::vector<char> out;
  out.reserve(4 + body.size());
  put_u32(out, static_cast<uint32_t>(body.size()));
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

std::vector<char> encode(const Request& r) {
  std::vector<char> b;
  b.push_back(static_cast<char>(r.op));
  put_u32(b, r.timeout_ms);
  put_u32(b, static_cast<uint32_t>(r.keys.size()));
  for (const auto& k : r.keys) {
    put_u32(b, static_cast<uint32_t>(k.size()));
    b.insert(b.end(), k.begin(), k.end());
  }
  put_u32(b, static_cast<uint32_t>(r.value.size()));
  b.insert(b.end(), r.value.begin(), r.value.end());
  return frame(b);
}

// False for anything malformed: the server answers it with kBadRequest.
bool decode(const std::vector<char>& body, Request& r) {
  const auto* p = reinterpret_cast<const unsigned char*>(body.data());
  size_t at = 0;
  const size_t n = body.size();
  auto u32 = [&](uint32_t& v) {
    if (n - at < 4) return false;
    v = get_u32(p + at);
    at += 4;
    return true;
  };
  auto bytes = [&](uint32_t len, auto& out) {
    if (n - at < len) return false;
    out.assign(body.data() + at, body.data() + at + len);
    at += len;
    return true;
  };
  if (n < 1) return false;
  r.op = p[at++];
  uint32_t nkeys = 0, vlen = 0;
  if (!u32(r.timeout_ms) || !u32(nkeys) || nkeys > kMaxKeys) return false;
  r.keys.assign(nkeys, {});
  for (auto& k : r.keys) {
    uint32_t len = 0;
    if (!u32(len) || !bytes(len, k)) return false;
  }
  if (!u32(vlen) || !bytes(vlen, r.value) || at != n) return false;
  switch (r.op) {
    case kSet:
    case kGet: return nkeys == 1;
    case kWait: return true;
    default: return false;
  }
}

std::string key_list(const std::vector<std::string>& keys) {
  std::string s;
  for (const auto& k : keys) s += (s.empty() ? "'" : ", '") + k + "'";
  return s;
}

class Session;

// The keys, and the sessions waiting for some; touched on the server's thread only.
struct ServerState {
  std::map<std::string, std::vector<char>> data;
  std::vector<std::weak_ptr<Session>> waiting;  // a get/wait not yet answered
  void wake();                                  // after a set
};

// One client connection, served on the server's thread (no locks needed).
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, ServerState& server)
      : socket_(std::move(socket)), timer_(socket_.get_executor()), server_(server) {}

  void start() { read_request(); }

  // Answers the pending get/wait if its keys all exist; false if it must wait on.
  bool try_answer() {
    if (!pending_) return true;
    for (const auto& k : req_.keys)
      if (!server_.data.count(k)) return false;
    pending_ = false;
    timer_.cancel();
    reply(kOk, req_.op == kGet ? server_.data[req_.keys[0]] : std::vector<char>{});
    return true;
  }

 private:
  void read_request() {
    auto self = shared_from_this();
    asio::async_read(socket_, asio::buffer(header_), [this, self](error_code ec, size_t) {
      if (ec) return close();
      const uint32_t len = get_u32(header_.data());
      if (len > kMaxFrame) return close();
      body_.resize(len);
      asio::async_read(socket_, asio::buffer(body_), [this, self](error_code ec, size_t) {
        if (ec) return close();
        handle();
      });
    });
  }

  void handle() {
    if (!decode(body_, req_)) return reply(kBadRequest, {});
    if (req_.op == kSet) {
      server_.data[req_.keys[0]] = std::move(req_.value);
      reply(kOk, {});
      server_.wake();
      return;
    }
    pending_ = true;
    if (try_answer()) return;
    server_.waiting.push_back(weak_from_this());
    timer_.expires_after(milliseconds(req_.timeout_ms));
    timer_.async_wait([this, self = shared_from_this()](error_code ec) {
      if (ec || !pending_) return;
      pending_ = false;
      reply(kTimeout, {});
    });
  }

  void reply(Status status, const std::vector<char>& value) {
    std::vector<char> body;
    body.reserve(1 + value.size());
    body.push_back(static_cast<char>(status));
    body.insert(body.end(), value.begin(), value.end());
    out_ = frame(body);
    asio::async_write(socket_, asio::buffer(out_), [this, self = shared_from_this()](error_code ec, size_t) {
      if (ec) return close();
      read_request();
    });
  }

  void close() {
    error_code ignored;
    pending_ = false;
    timer_.cancel();
    socket_.close(ignored);
  }

  tcp::socket socket_;
  asio::steady_timer timer_;
  ServerState& server_;
  std::array<unsigned char, 4> header_{};
  std::vector<char> body_, out_;
  Request req_;
  bool pending_ = false;
};

void ServerState::wake() {
  std::vector<std::weak_ptr<Session>> still;
  for (auto& w : waiting)
    if (auto s = w.lock(); s && !s->try_answer()) still.push_back(w);
  waiting = std::move(still);
}

}  // namespace

struct StoreServer::Impl {
  asio::io_context io;  // first: destroyed last, after the sessions it owns
  tcp::acceptor acceptor{io};
  ServerState state;
  uint16_t port = 0;
  std::thread thread;

  void accept();
};

void StoreServer::Impl::accept() {
  acceptor.async_accept([this](error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted) return;
    if (!ec) {
      error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);
      std::make_shared<Session>(std::move(socket), state)->start();
    }
    accept();
  });
}

StoreServer::StoreServer(const std::string& host, uint16_t port) : impl_(std::make_unique<Impl>()) {
  const std::string where = host + ":" + std::to_string(port);
  auto fail = [&](const std::string& why) {
    throw std::runtime_error("store server cannot listen on " + where + ": " + why);
  };
  error_code ec;
  tcp::resolver resolver(impl_->io);
  auto results =
      resolver.resolve(host, std::to_string(port), tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || results.empty()) fail(ec ? ec.message() : "host not found");
  const tcp::endpoint endpoint = results.begin()->endpoint();
  auto& a = impl_->acceptor;
  if (a.open(endpoint.protocol(), ec)) fail(ec.message());
  if (a.set_option(asio::socket_base::reuse_address(true), ec)) fail(ec.message());
  if (a.bind(endpoint, ec)) fail(ec.message());
  if (a.listen(asio::socket_base::max_listen_connections, ec)) fail(ec.message());
  impl_->port = a.local_endpoint().port();
  impl_->accept();
  impl_->thread = std::thread([impl = impl_.get()] { impl->io.run(); });
}

StoreServer::~StoreServer() {
  impl_->io.stop();
  impl_->thread.join();
}

uint16_t StoreServer::port() const { return impl_->port; }

struct TcpStore::Impl {
  std::string host;
  uint16_t port;
  std::string address;
  milliseconds timeout;
  asio::io_context io;
  tcp::socket socket{io};
  bool connected = false;
  std::string broken;  // why the connection is unusable; empty while it is fine
  std::atomic<bool> interrupted{false};
  std::mutex why_mu;
  std::string why;

  [[noreturn]] void fail(const std::string& what, const std::string& detail) {
    throw CollectiveError("store " + address + ": " + what + ": " + detail);
  }

  void check_interrupted(const std::string& what) {
    if (!interrupted) return;
    std::lock_guard lock(why_mu);
    fail(what, "interrupted: " + why);
  }

  // Runs the I/O started by the caller until `done` or the deadline. On the
  // deadline (or when interrupted) the socket is closed and the handlers are
  // drained, so none outlives the caller's locals they refer to.
  bool run_until(const bool& done, Clock::time_point deadline) {
    io.restart();
    while (!done && Clock::now() < deadline) {
      if (io.run_one_until(deadline) == 0 && io.stopped()) io.restart();
    }
    if (done) return true;
    error_code ignored;
    socket.close(ignored);
    connected = false;
    io.restart();
    io.run();
    return false;
  }

  void connect(const std::string& what) {
    const auto deadline = Clock::now() + timeout;
    error_code ec;
    tcp::resolver resolver(io);
    auto endpoints = resolver.resolve(host, std::to_string(port), tcp::resolver::numeric_service, ec);
    if (ec || endpoints.empty()) fail(what, "cannot resolve the host: " + (ec ? ec.message() : "no address"));
    std::string last = "no attempt";
    // The server may not be listening yet: retry until the deadline.
    for (;;) {
      check_interrupted(what);
      bool done = false;
      error_code result;
      asio::async_connect(socket, endpoints, [&](error_code e, const tcp::endpoint&) {
        result = e;
        done = true;
      });
      if (!run_until(done, deadline)) break;
      if (!result) {
        socket.set_option(tcp::no_delay(true), ec);
        connected = true;
        return;
      }
      last = result.message();
      error_code ignored;
      socket.close(ignored);
      if (Clock::now() + milliseconds(50) >= deadline) break;
      bool slept = false;
      asio::steady_timer pause(io, milliseconds(50));
      pause.async_wait([&](error_code) { slept = true; });
      run_until(slept, deadline);
    }
    check_interrupted(what);
    fail(what, "cannot connect within " + std::to_string(timeout.count()) + " ms (" + last + ")");
  }

  // Sends `req` and returns the reply's body. `answer_within` is how long the
  // server may take by the request's own terms.
  std::vector<char> exchange(const Request& req, const std::string& what, milliseconds answer_within) {
    check_interrupted(what);
    if (!broken.empty()) fail(what, broken);
    if (!connected) connect(what);
    const std::vector<char> out = encode(req);
    std::array<unsigned char, 4> header{};
    std::vector<char> body;
    error_code result;
    bool done = false;
    auto finish = [&](error_code e) {
      result = e;
      done = true;
    };
    asio::async_write(socket, asio::buffer(out), [&](error_code e, size_t) {
      if (e) return finish(e);
      asio::async_read(socket, asio::buffer(header), [&](error_code e, size_t) {
        if (e) return finish(e);
        const uint32_t len = get_u32(header.data());
        if (len == 0 || len > kMaxFrame) return finish(asio::error::message_size);
        body.resize(len);
        asio::async_read(socket, asio::buffer(body), [&](error_code e, size_t) { finish(e); });
      });
    });
    if (!run_until(done, Clock::now() + answer_within + kReplySlack)) {
      check_interrupted(what);
      broken = "the server did not answer in time";
      fail(what, broken);
    }
    if (result) {
      error_code ignored;
      socket.close(ignored);
      connected = false;
      check_interrupted(what);
      broken = "connection lost (" + result.message() + "): is the store server gone?";
      fail(what, broken);
    }
    switch (static_cast<uint8_t>(body[0])) {
      case kOk: return std::vector<char>(body.begin() + 1, body.end());
      case kTimeout: fail(what, "timed out after " + std::to_string(req.timeout_ms) + " ms");
      default: fail(what, "the server refused the request");
    }
  }

  void wait(const std::vector<std::string>& keys, milliseconds t, uint8_t op, std::vector<char>* value) {
    if (t <= milliseconds::zero()) t = timeout;
    Request req;
    req.op = op;
    req.timeout_ms = static_cast<uint32_t>(std::min<int64_t>(t.count(), UINT32_MAX));
    req.keys = keys;
    auto got = exchange(req, (op == kGet ? "get of key " : "wait for keys ") + key_list(keys), t);
    if (value) *value = std::move(got);
  }
};

TcpStore::TcpStore(std::string host, uint16_t port, milliseconds timeout) : impl_(std::make_unique<Impl>()) {
  impl_->host = std::move(host);
  impl_->port = port;
  impl_->address = impl_->host + ":" + std::to_string(port);
  impl_->timeout = timeout;
}

TcpStore::~TcpStore() = default;

void TcpStore::set(const std::string& key, const std::vector<char>& value) {
  Request req;
  req.op = kSet;
  req.keys = {key};
  req.value = value;
  impl_->exchange(req, "set of key '" + key + "'", impl_->timeout);
}

std::vector<char> TcpStore::get(const std::string& key) {
  std::vector<char> value;
  impl_->wait({key}, impl_->timeout, kGet, &value);
  return value;
}

void TcpStore::wait(const std::vector<std::string>& keys) { impl_->wait(keys, impl_->timeout, kWait, nullptr); }

void TcpStore::wait(const std::vector<std::string>& keys, const milliseconds& timeout) {
  impl_->wait(keys, timeout, kWait, nullptr);
}

void TcpStore::interrupt(const std::string& why) {
  {
    std::lock_guard lock(impl_->why_mu);
    if (impl_->interrupted) return;
    impl_->why = why;
    impl_->interrupted = true;
  }
  // Closing the socket on the I/O's own thread ends the call in progress; a
  // later call sees the flag first.
  asio::post(impl_->io, [impl = impl_.get()] {
    error_code ignored;
    impl->socket.close(ignored);
  });
}

const std::string& TcpStore::address() const { return impl_->address; }

}  // namespace inferd::comm
