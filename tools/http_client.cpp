#include "tools/http_client.hpp"

#include <stdexcept>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
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

HttpReply http_request(const Url& url, std::string_view method, std::string_view path, std::string_view body,
                       std::chrono::milliseconds timeout) {
  asio::io_context ioc;
  beast::tcp_stream stream(ioc);
  beast::error_code ec;
  auto fail = [&](std::string_view what) {
    throw std::runtime_error("cannot reach " + url.text() + ": " + std::string(what));
  };

  asio::ip::tcp::resolver resolver(ioc);
  auto endpoints = resolver.resolve(url.host, url.port, ec);
  if (ec) fail(ec.message());
  // The synchronous calls ignore tcp_stream's deadlines, so run the async ones.
  stream.expires_after(timeout);
  stream.async_connect(endpoints, [&](beast::error_code e, const auto&) { ec = e; });
  ioc.run();
  if (ec) fail(ec == beast::error::timeout ? "connection timed out" : ec.message());

  http::request<http::string_body> req{http::string_to_verb(method), url.base + std::string(path), 11};
  req.set(http::field::host, url.host);
  req.set(http::field::user_agent, "inferctl");
  req.set(http::field::connection, "close");
  if (!body.empty()) {
    req.set(http::field::content_type, "application/json");
    req.body() = std::string(body);
  }
  req.prepare_payload();

  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(64 << 20);
  stream.expires_after(timeout);
  http::async_write(stream, req, [&](beast::error_code e, size_t) {
    ec = e;
    if (!e) http::async_read(stream, buffer, parser, [&](beast::error_code e2, size_t) { ec = e2; });
  });
  ioc.restart();
  ioc.run();
  if (ec) fail(ec == beast::error::timeout ? "no answer within " + std::to_string(timeout.count()) + " ms" : ec.message());

  HttpReply reply;
  reply.status = static_cast<int>(parser.get().result_int());
  reply.content_type = std::string(parser.get()[http::field::content_type]);
  reply.body = std::move(parser.get().body());
  stream.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ec);
  return reply;
}

}  // namespace inferd::tools
