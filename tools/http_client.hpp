// A small synchronous HTTP/1.1 client for inferctl's subcommands that talk to a
// running daemon (status now; bench and warm-up against the API later).
#pragma once
#include <chrono>
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
HttpReply http_request(const Url& url, std::string_view method, std::string_view path, std::string_view body = {},
                       std::chrono::milliseconds timeout = std::chrono::seconds(5));

}  // namespace inferd::tools
