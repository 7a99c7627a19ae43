// HttpServer: the listener, the I/O threads and the routes. Connections are
// http_session.cpp's, routing http_router.cpp's, responders http_responder.cpp's,
// the Request and Response values http_message.cpp's.
// Beast stays out of every header, so the rest of the daemon compiles without it.
#include "daemon/http_server.hpp"

#include <optional>
#include <stdexcept>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <spdlog/spdlog.h>

#include "daemon/http_session.hpp"

namespace inferd::daemon {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;

struct HttpServer::Impl {
  Impl(HttpServerOptions options, Metrics* metrics) : state(std::move(options), metrics) {}
  void accept();

  ServerState state;
  uint16_t bound_port = 0;
  bool started = false;
  bool stopped = false;
  // Declared after `state` so it is destroyed first: destroying it releases the
  // sessions its pending handlers still own, and they unregister from `state`.
  asio::io_context ioc;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::optional<tcp::acceptor> acceptor;
  std::optional<asio::steady_timer> accept_retry;
  std::vector<std::thread> threads;
};

void HttpServer::Impl::accept() {
  // Each connection gets a strand of its own: its handlers never run concurrently.
  acceptor->async_accept(asio::make_strand(ioc), [this](error_code ec, tcp::socket socket) {
    if (!acceptor->is_open() || ec == asio::error::operation_aborted) return;
    if (ec) {
      // Out of descriptors and the like: back off instead of spinning.
      spdlog::warn("http: accept failed: {}", ec.message());
      accept_retry->expires_after(std::chrono::milliseconds(100));
      accept_retry->async_wait([this](error_code e) {
        if (!e && acceptor->is_open()) accept();
      });
      return;
    }
    error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);  // SSE deltas are small and latency-bound
    start_session(state, std::move(socket));
    accept();
  });
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
  const std::string where = endpoint_text(opts.host, opts.port);
  error_code ec;
  tcp::resolver resolver(s.ioc);
  auto results = resolver.resolve(opts.host, std::to_string(opts.port),
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
  s.accept();
  for (int i = 0; i < opts.io_threads; ++i) s.threads.emplace_back([&s] { s.ioc.run(); });
  spdlog::info("http: listening on {} ({} I/O threads)", endpoint_text(opts.host, s.bound_port), opts.io_threads);
}

void HttpServer::stop() {
  Impl& s = *impl_;
  if (!s.started || s.stopped) return;
  s.stopped = true;
  s.state.accepting = false;
  {
    // After this no responder reaches the io_context again.
    std::unique_lock lock(s.state.gate->mu);
    s.state.gate->open = false;
  }
  s.ioc.stop();
  for (auto& t : s.threads) t.join();
  s.threads.clear();

  // The I/O threads are gone, so sessions may be touched from here.
  error_code ignored;
  s.acceptor->close(ignored);
  s.accept_retry->cancel();
  close_sessions(s.state);
  s.work.reset();
  // Let the aborted operations complete so the sessions they hold are released.
  s.ioc.restart();
  s.ioc.poll();
  spdlog::info("http: stopped");
}

void HttpServer::set_accepting(bool accepting) { impl_->state.accepting = accepting; }
bool HttpServer::accepting() const { return impl_->state.accepting; }
int HttpServer::in_flight() const { return impl_->state.in_flight.load(); }
uint16_t HttpServer::port() const { return impl_->bound_port; }
const HttpServerOptions& HttpServer::options() const { return impl_->state.opts; }

}  // namespace inferd::daemon
