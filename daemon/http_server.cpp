// HttpServer: the listeners (the main one and the admin one, TCP on 127.0.0.1
// and/or a Unix socket), the I/O threads and the routes. Connections are
// http_session.cpp's, routing http_router.cpp's, responders http_responder.cpp's,
// the Request and Response values http_message.cpp's;
// Beast stays out of every header, so the rest of the daemon compiles without it.
#include "daemon/http_server.hpp"

#include <malloc.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <type_traits>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <spdlog/spdlog.h>

#include "daemon/http_session.hpp"

namespace inferd::daemon {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;

namespace {

using local = asio::local::stream_protocol;

// How often the accept thread looks whether a burst of connections has ended.
constexpr std::chrono::seconds kTrimCheckPeriod{2};
// Connections closed since the peak after which freed memory goes back to the
// system: about 4 KiB each, so 1024 of them is 4 MiB. Once the count has
// stopped moving for a period, fewer suffice: the tail of a burst that closed
// across several checks would otherwise stay behind.
constexpr std::size_t kTrimAfterClosed = 1024;
constexpr std::size_t kTrimAfterClosedSettled = 64;
// How long a new connection on the main listener may take to send its first
// bytes and still be triaged on the accept thread (see triage()). A health
// probe sends its request as soon as it has connected.
constexpr std::chrono::milliseconds kTriageWindow{250};

using Socket = asio::generic::stream_protocol::socket;

// One listening socket: the main one or an admin one.
template <class Protocol>
struct Listener {
  Listener(typename Protocol::acceptor a, std::string name, bool admin)
      : acceptor(std::move(a)), retry(acceptor.get_executor()), name(std::move(name)), admin(admin) {}
  typename Protocol::acceptor acceptor;
  asio::steady_timer retry;
  std::string name;  // where it listens, for logs
  bool admin;
};

tcp::acceptor listen_tcp(asio::io_context& ioc, const std::string& host, uint16_t port) {
  const std::string where = endpoint_text(host, port);
  error_code ec;
  tcp::resolver resolver(ioc);
  auto results = resolver.resolve(host, std::to_string(port), tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || results.empty())
    throw std::runtime_error("cannot listen on " + where + ": " + (ec ? ec.message() : "host not found"));
  const tcp::endpoint endpoint = results.begin()->endpoint();
  tcp::acceptor acceptor(ioc);
  auto fail = [&](error_code e) { throw std::runtime_error("cannot listen on " + where + ": " + e.message()); };
  if (acceptor.open(endpoint.protocol(), ec)) fail(ec);
  if (acceptor.set_option(asio::socket_base::reuse_address(true), ec)) fail(ec);
  if (acceptor.bind(endpoint, ec)) fail(ec);
  if (acceptor.listen(asio::socket_base::max_listen_connections, ec)) fail(ec);
  return acceptor;
}

// A Unix socket only its owner may connect to. A socket file left by a process
// that is gone is replaced; one that still answers is not.
local::acceptor listen_unix(asio::io_context& ioc, const std::string& path) {
  auto fail = [&](const std::string& why) -> void {
    throw std::runtime_error("cannot listen on unix socket " + path + ": " + why);
  };
  error_code ec;
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) fail("a file that is not a socket is in the way");
    local::socket probe(ioc);
    if (!probe.connect(local::endpoint(path), ec)) fail("another process is listening on it");
    ::unlink(path.c_str());
  }
  local::acceptor acceptor(ioc);
  if (acceptor.open(local(), ec)) fail(ec.message());
  if (acceptor.bind(local::endpoint(path), ec)) fail(ec.message());
  // Before listen(): nobody can connect until the mode is set.
  if (::chmod(path.c_str(), 0600) != 0) fail(std::strerror(errno));
  if (acceptor.listen(asio::socket_base::max_listen_connections, ec)) fail(ec.message());
  return acceptor;
}

// What a new connection has sent is one request head for a health route, and
// nothing after it (requests pipelined behind it belong on the I/O threads).
bool is_health_probe(tcp::socket& socket) {
  char bytes[2048];
  const ssize_t n = ::recv(socket.native_handle(), bytes, sizeof bytes, MSG_PEEK | MSG_DONTWAIT);
  const std::string_view head(bytes, n > 0 ? static_cast<std::size_t>(n) : 0);
  const auto end = head.find("\r\n\r\n");
  return head.starts_with("GET /health/") && end != std::string_view::npos && end + 4 == head.size();
}

std::string peer_of(const tcp::socket& socket) {
  error_code ec;
  const auto ep = socket.remote_endpoint(ec);
  return ec ? std::string("unknown") : endpoint_text(ep.address().to_string(), ep.port());
}

}  // namespace

struct HttpServer::Impl {
  Impl(HttpServerOptions options, Metrics* metrics) : state(std::move(options), metrics) {}
  template <class Protocol>
  void accept(Listener<Protocol>& listener);
  void triage(tcp::socket socket);
  void hand_over(tcp::socket socket);
  template <class Protocol>
  static void close(std::optional<Listener<Protocol>>& listener);
  void trim_after_bursts(std::size_t open_before);

  ServerState state;
  uint16_t bound_port = 0;
  uint16_t bound_admin_port = 0;
  bool started = false;
  std::atomic<bool> stopped{false};
  // Declared after `state` so it is destroyed first: destroying it releases the
  // sessions its pending handlers still own, and they unregister from `state`.
  asio::io_context ioc;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  // The listeners run on a context and a thread of their own. A connection is
  // accepted there and a main listener's session handed to `ioc`, so
  //  - the kernel's accept queue is drained even while the I/O threads work
  //    through a burst (thousands of idle connections timing out or hanging up
  //    at once): a health check's connection is not queued behind the burst;
  //  - the reactor's per-descriptor records, which Asio pools and never frees,
  //    are allocated by this thread, in its malloc arena, instead of between
  //    the sessions' memory in the I/O threads' arenas, where each pooled record
  //    kept a page of freed session memory from going back to the system.
  asio::io_context accept_ioc;
  std::thread accept_thread;
  asio::steady_timer trim_timer{accept_ioc};
  std::optional<Listener<tcp>> main;
  std::optional<Listener<tcp>> admin_tcp;
  std::optional<Listener<local>> admin_unix;
  std::vector<std::thread> threads;
};

template <class Protocol>
void HttpServer::Impl::accept(Listener<Protocol>& l) {
  // Every connection is accepted on the accept thread. The admin listener's
  // sessions are served there too, so a health check or a metrics scrape there
  // never waits behind the main listener's traffic (a burst of thousands of
  // connections opening or closing, a full load of streams); the main
  // listener's are triaged first (see triage()).
  l.acceptor.async_accept(asio::make_strand(accept_ioc), [this, &l](error_code ec, typename Protocol::socket socket) {
    if (!l.acceptor.is_open() || ec == asio::error::operation_aborted) return;
    if (ec) {
      // Out of descriptors and the like: back off instead of spinning.
      spdlog::warn("http: accept on {} failed: {}", l.name, ec.message());
      l.retry.expires_after(std::chrono::milliseconds(100));
      l.retry.async_wait([this, &l](error_code e) {
        if (!e && l.acceptor.is_open()) accept(l);
      });
      return;
    }
    if constexpr (std::is_same_v<Protocol, tcp>) {
      error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);  // SSE deltas are small and latency-bound
      if (!l.admin) {
        triage(std::move(socket));
        return accept(l);
      }
    }
    std::string peer = "unix:" + l.name;
    if constexpr (std::is_same_v<Protocol, tcp>) peer = peer_of(socket);
    Socket generic(std::move(socket));
    const auto ex = generic.get_executor();
    asio::post(ex, [this, peer = std::move(peer), socket = std::move(generic)]() mutable {
      if (!stopped) start_session(state, std::move(socket), std::move(peer), /*admin=*/true);
    });
    accept(l);
  });
}

// A health probe on the main listener must not queue behind the I/O threads'
// work: thousands of connections that opened or timed out together are as many
// handlers ahead of it. So a new connection stays on the accept thread until
// its first bytes arrive (at most kTriageWindow): a complete `GET /health/...`
// request head is served right here, over the connection limit too, and the
// connection closes after the answer. Anything else, and a connection silent
// for the window, goes to the I/O threads, or is refused at the limit.
void HttpServer::Impl::triage(tcp::socket socket) {
  struct Pending {
    explicit Pending(tcp::socket s) : socket(std::move(s)), window(socket.get_executor()) {}
    tcp::socket socket;
    asio::steady_timer window;
    bool decided = false;
  };
  auto p = std::make_shared<Pending>(std::move(socket));
  p->window.expires_after(kTriageWindow);
  p->window.async_wait([this, p](error_code ec) {
    if (ec || p->decided || stopped) return;
    p->decided = true;
    hand_over(std::move(p->socket));  // cancels the wait below
  });
  p->socket.async_wait(tcp::socket::wait_read, [this, p](error_code ec) {
    if (ec == asio::error::operation_aborted || p->decided || stopped) return;
    p->decided = true;
    p->window.cancel();
    if (!ec && is_health_probe(p->socket)) {
      std::string peer = peer_of(p->socket);
      start_session(state, Socket(std::move(p->socket)), std::move(peer), /*admin=*/false, /*one_request=*/true);
      return;
    }
    hand_over(std::move(p->socket));
  });
}

// The connection moves to an I/O thread's strand, its descriptor re-registered
// from this thread (so Asio's record for it stays in this thread's arena), and
// its session is built on that strand, so it takes its memory from an I/O
// thread's arena (see accept_ioc). Not after stop(): its final polls would
// otherwise start it.
void HttpServer::Impl::hand_over(tcp::socket socket) {
  error_code ec;
  std::string peer = peer_of(socket);
  const auto protocol = socket.local_endpoint(ec).protocol();
  if (ec) return;  // the client already went away
  const auto fd = socket.release(ec);
  if (ec) return;
  tcp::socket moved(asio::make_strand(ioc));
  moved.assign(protocol, fd, ec);
  if (ec) {
    ::close(fd);
    return;
  }
  const bool refuse = open_connections(state) >= static_cast<std::size_t>(state.opts.max_connections);
  Socket generic(std::move(moved));
  const auto ex = generic.get_executor();
  asio::post(ex, [this, refuse, peer = std::move(peer), socket = std::move(generic)]() mutable {
    if (stopped) return;
    if (refuse) refuse_connection(state, std::move(socket));
    else start_session(state, std::move(socket), std::move(peer), /*admin=*/false);
  });
}

// Freed session memory stays in the allocator's arenas, and glibc returns it
// to the system only from the top of a heap. After a burst of connections ends
// (thousands of idle ones closed), malloc_trim gives back the freed pages
// inside the heaps too, so RSS follows the open connections instead of staying
// at their high-water mark. Checked on the accept thread; the I/O threads only
// wait for an arena's lock while it is trimmed.
void HttpServer::Impl::trim_after_bursts(std::size_t open_before) {
  const auto [open, peak] = connection_counts(state);
  const bool settled = open == open_before;
  if (peak - open >= (settled ? kTrimAfterClosedSettled : kTrimAfterClosed)) {
    ::malloc_trim(0);
    reset_connection_peak(state);
  }
  trim_timer.expires_after(kTrimCheckPeriod);
  trim_timer.async_wait([this, open = open](error_code ec) {
    if (!ec) trim_after_bursts(open);
  });
}

template <class Protocol>
void HttpServer::Impl::close(std::optional<Listener<Protocol>>& l) {
  if (!l) return;
  error_code ignored;
  l->acceptor.close(ignored);
  l->retry.cancel();
}

HttpServer::HttpServer(HttpServerOptions options, Metrics* metrics)
    : impl_(std::make_unique<Impl>(std::move(options), metrics)) {}

HttpServer::~HttpServer() { stop(); }

void HttpServer::route(std::string method, std::string path, Handler handler, RouteOptions options) {
  if (impl_->started) throw std::logic_error("HttpServer::route after start()");
  impl_->state.router.add(std::move(method), std::move(path), std::move(handler), options);
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
  impl_->state.router.add_prefix(std::move(method), std::move(prefix), std::move(handler), options);
}

void HttpServer::start() {
  Impl& s = *impl_;
  if (s.started) throw std::logic_error("HttpServer::start called twice");
  const HttpServerOptions& opts = s.state.opts;
  s.main.emplace(listen_tcp(s.accept_ioc, opts.host, opts.port), "", false);
  s.bound_port = s.main->acceptor.local_endpoint().port();
  s.main->name = endpoint_text(opts.host, s.bound_port);
  if (opts.admin_port) {
    s.admin_tcp.emplace(listen_tcp(s.accept_ioc, "127.0.0.1", *opts.admin_port), "", true);
    s.bound_admin_port = s.admin_tcp->acceptor.local_endpoint().port();
    s.admin_tcp->name = endpoint_text("127.0.0.1", s.bound_admin_port);
  }
  if (!opts.admin_socket.empty()) s.admin_unix.emplace(listen_unix(s.accept_ioc, opts.admin_socket), opts.admin_socket, true);
  s.started = true;

  s.work.emplace(s.ioc.get_executor());
  // Asio makes an I/O context's reactor (three descriptors) with its first
  // socket. Made now, not at the first connection handed over to the I/O
  // threads, so the count of open descriptors is the same from the start.
  { tcp::socket first(s.ioc); }
  s.accept(*s.main);
  if (s.admin_tcp) s.accept(*s.admin_tcp);
  if (s.admin_unix) s.accept(*s.admin_unix);
  s.trim_after_bursts(0);
  s.accept_thread = std::thread([&s] { s.accept_ioc.run(); });
  for (int i = 0; i < opts.io_threads; ++i) s.threads.emplace_back([&s] { s.ioc.run(); });
  spdlog::info("http: listening on {} ({} I/O threads)", s.main->name, opts.io_threads);
  if (s.admin_tcp) spdlog::info("http: admin listener on {}", s.admin_tcp->name);
  if (s.admin_unix) spdlog::info("http: admin listener on unix socket {}", s.admin_unix->name);
}

void HttpServer::stop() {
  Impl& s = *impl_;
  if (!s.started || s.stopped.exchange(true)) return;
  s.state.accepting = false;
  // No connection is accepted or handed to the I/O threads after this; the
  // admin listener's sessions stop with it.
  s.accept_ioc.stop();
  s.accept_thread.join();
  {
    // After this no responder reaches the io_context again.
    std::unique_lock lock(s.state.gate->mu);
    s.state.gate->open = false;
  }
  s.ioc.stop();
  for (auto& t : s.threads) t.join();
  s.threads.clear();

  // The I/O threads are gone, so sessions may be touched from here.
  Impl::close(s.main);
  Impl::close(s.admin_tcp);
  Impl::close(s.admin_unix);
  if (s.admin_unix) ::unlink(s.admin_unix->name.c_str());
  close_sessions(s.state);
  s.state.work.join();  // offloaded handlers end; their responders no longer reach anything
  s.work.reset();
  // Let the aborted operations complete so the sessions they hold are released.
  s.trim_timer.cancel();
  s.ioc.restart();
  s.ioc.poll();
  s.accept_ioc.restart();
  s.accept_ioc.poll();
  spdlog::info("http: stopped");
}

void HttpServer::set_accepting(bool accepting) { impl_->state.accepting = accepting; }
bool HttpServer::accepting() const { return impl_->state.accepting; }
int HttpServer::in_flight() const { return impl_->state.in_flight.load(); }
uint16_t HttpServer::port() const { return impl_->bound_port; }
uint16_t HttpServer::admin_port() const { return impl_->bound_admin_port; }
const HttpServerOptions& HttpServer::options() const { return impl_->state.opts; }

}  // namespace inferd::daemon
