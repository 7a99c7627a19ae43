// A small synchronous HTTP/1.1 client for inferctl's subcommands that talk to a
// running daemon (status, bench serve).
#pragma once
#include <chrono>
#include <functional>
#include <string>
#include <string_view>

namespace inferd::tools {

// http://host[:port][/base]; the port defaults to 80. Only plain HTTP.
struct Url {
  std::string host;
  std::string port;
  std::string base;  // path prefix without a trailing '/', usually empty
  std::string text() const;
};

// Throws std::invalid_argument naming what is wrong.
Url parse_url(std::string_view url);

struct HttpReply {
  int status = 0;
  std::string content_type;
  std::string body;
};

// One request on a fresh connection; `path` is appended to the URL's base.
// Throws std::runtime_error ("cannot reach http://127.0.0.1:8000: Connection
// refused") when the daemon cannot be reached or answers with something that
// is not HTTP within `timeout`.
// A non-empty `api_key` is sent as "Authorization: Bearer <api_key>".
HttpReply http_request(const Url& url, std::string_view method, std::string_view path, std::string_view body = {},
                       std::chrono::milliseconds timeout = std::chrono::seconds(5), std::string_view api_key = {});

// Like http_request, but hands the body to `on_data` piece by piece as it
// arrives (server-sent events), so the caller can time each piece; the reply's
// body stays empty. `timeout` bounds connecting and each read, not the whole
// response, so a long stream that keeps sending is never cut.
HttpReply http_request_streamed(const Url& url, std::string_view method, std::string_view path, std::string_view body,
                                const std::function<void(std::string_view)>& on_data,
                                std::chrono::milliseconds timeout = std::chrono::seconds(60),
                                std::string_view api_key = {});

}  // namespace inferd::tools
