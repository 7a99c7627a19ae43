// The Request and Response values of http_server.hpp, apart from the server so
// that code handling them (the router, tests, fuzz targets) links without Asio.
#include <boost/beast/core/string.hpp>

#include "daemon/http_server.hpp"
#include "daemon/json_error.hpp"

namespace inferd::daemon {

std::string_view Request::header(std::string_view name) const {
  for (const auto& [n, v] : headers)
    if (boost::beast::iequals(n, name)) return v;
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

}  // namespace inferd::daemon
