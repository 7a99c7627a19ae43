#include "tools/http_client.hpp"

#include <stdexcept>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

namespace inferd::tools {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

std::string Url::text() const {
  const std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return "http://" + h + ":" + port + base;
}

Url parse_url(std::string_view url) {
  constexpr std::string_view kScheme = "http://";
  if (!url.starts_with(kScheme)) throw std::invalid_argument("URL must start with http://: '" + std::string(url) + "'");
  std::string_view rest = url.substr(kScheme.size());
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  Url u;
  if (slash != std::string_view::npos) u.base = std::string(rest.substr(slash));
  while (!u.base.empty() && u.base.back() == '/') u.base.pop_back();
  if (authority.starts_with('[')) {  // [::1]:8000
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) throw std::invalid_argument("URL has an unclosed '[': '" + std::string(url) + "'");
    u.host = std::string(authority.substr(1, close - 1));
    authority.remove_prefix(close + 1);
    if (!authority.empty() && authority.front() != ':')
      throw std::invalid_argument("URL has junk after ']': '" + std::string(url) + "'");
    u.port = authority.empty() ? "80" : std::string(authority.substr(1));
  } else {
    const size_t colon = authority.rfind(':');
    u.host = std::string(authority.substr(0, colon));
    u.port = colon == std::string_view::npos ? "80" : std::string(authority.substr(colon + 1));
  }
  if (u.host.empty()) throw std::invalid_argument("URL has no host: '" + std::string(url) + "'");
  if (u.port.empty() || u.port.size() > 5 || u.port.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(u.port) == 0 || std::stoi(u.port) > 65535)
    throw std::invalid_argument("URL has a bad port: '" + std::string(url) + "'");
  return u;
}

namespace {

// One connection and its read buffer; each call runs its own io_context.
struct Connection {
  asio::io_context ioc;
  beast::tcp_stream stream{ioc};
  beast::flat_buffer buffer;
};

[[noreturn]] void fail(const Url& url, std::string_view what) {
  throw std::runtime_error("cannot reach " + url.text() + ": " + std::string(what));
}

[[noreturn]] void fail(const Url& url, beast::error_code ec, std::chrono::milliseconds timeout) {
  fail(url, ec == beast::error::timeout ? "no answer within " + std::to_string(timeout.count()) + " ms" : ec.message());
}

// Runs one asynchronous step under `timeout`: the synchronous calls ignore
// tcp_stream's deadlines, so every step is async and run here.
template <class Start>
beast::error_code run_step(Connection& c, std::chrono::milliseconds timeout, Start start) {
  beast::error_code ec;
  c.stream.expires_after(timeout);
  start([&ec](beast::error_code e, auto&&...) { ec = e; });
  c.ioc.restart();
  c.ioc.run();
  return ec;
}

// Connects and writes the request; throws naming the URL when either fails.
void send_request(Connection& c, const Url& url, std::string_view method, std::string_view path,
                  std::string_view body, std::chrono::milliseconds timeout, std::string_view api_key) {
  beast::error_code ec;
  asio::ip::tcp::resolver resolver(c.ioc);
  auto endpoints = resolver.resolve(url.host, url.port, ec);
  if (ec) fail(url, ec.message());
  ec = run_step(c, timeout, [&](auto done) { c.stream.async_connect(endpoints, done); });
  if (ec) fail(url, ec == beast::error::timeout ? "connection timed out" : ec.message());

  http::request<http::string_body> req{http::string_to_verb(method), url.base + std::string(path), 11};
  req.set(http::field::host, url.host);
  req.set(http::field::user_agent, "inferctl");
  req.set(http::field::connection, "close");
  if (!api_key.empty()) req.set(http::field::authorization, "Bearer " + std::string(api_key));
  if (!body.empty()) {
    req.set(http::field::content_type, "application/json");
    req.body() = std::string(body);
  }
  req.prepare_payload();
  ec = run_step(c, timeout, [&](auto done) { http::async_write(c.stream, req, done); });
  if (ec) fail(url, ec, timeout);
}

template <class Body>
HttpReply head_of(const http::response_parser<Body>& parser) {
  HttpReply reply;
  reply.status = static_cast<int>(parser.get().result_int());
  reply.content_type = std::string(parser.get()[http::field::content_type]);
  return reply;
}

}  // namespace

HttpReply http_request(const Url& url, std::string_view method, std::string_view path, std::string_view body,
                       std::chrono::milliseconds timeout, std::string_view api_key) {
  Connection c;
  send_request(c, url, method, path, body, timeout, api_key);
  http::response_parser<http::string_body> parser;
  parser.body_limit(64 << 20);
  const auto ec = run_step(c, timeout, [&](auto done) { http::async_read(c.stream, c.buffer, parser, done); });
  if (ec) fail(url, ec, timeout);

  HttpReply reply = head_of(parser);
  reply.body = std::move(parser.get().body());
  beast::error_code ignored;
  c.stream.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  return reply;
}

HttpReply http_request_streamed(const Url& url, std::string_view method, std::string_view path, std::string_view body,
                                const std::function<void(std::string_view)>& on_data,
                                std::chrono::milliseconds timeout, std::string_view api_key) {
  Connection c;
  send_request(c, url, method, path, body, timeout, api_key);
  http::response_parser<http::buffer_body> parser;
  parser.body_limit(boost::none);  // a stream has no natural bound
  auto ec = run_step(c, timeout, [&](auto done) { http::async_read_header(c.stream, c.buffer, parser, done); });
  if (ec) fail(url, ec, timeout);

  char chunk[16 << 10];
  while (!parser.is_done()) {
    parser.get().body().data = chunk;
    parser.get().body().size = sizeof chunk;
    ec = run_step(c, timeout, [&](auto done) { http::async_read_some(c.stream, c.buffer, parser, done); });
    if (ec == http::error::need_buffer) ec = {};  // the chunk is full; hand it over and read on
    if (ec) fail(url, ec, timeout);
    const size_t got = sizeof chunk - parser.get().body().size;
    if (got > 0) on_data(std::string_view(chunk, got));
  }
  beast::error_code ignored;
  c.stream.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  return head_of(parser);
}

}  // namespace inferd::tools
