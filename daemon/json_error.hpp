// Errors as the OpenAI API shapes them:
//   {"error": {"message": "...", "type": "...", "param": null, "code": 400}}
// `code` carries the HTTP status as vLLM does, so clients of either see the same body.
#pragma once
#include <stdexcept>
#include <string>
#include <string_view>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

namespace inferd::daemon {

// The conventional `type` for a status: invalid_request_error (4xx),
// authentication_error (401), not_found_error (404), server_error (5xx), ...
std::string_view error_type_for(int status);

// The inner {"message", "type", "param", "code"} object; an empty `type` means
// error_type_for(status), an empty `param` is null.
boost::json::object error_object(int status, std::string_view message, std::string_view type = {},
                                 std::string_view param = {});
// The whole body: {"error": error_object(...)}.
std::string error_body(int status, std::string_view message, std::string_view type = {},
                       std::string_view param = {});

// Thrown by a handler to answer with an error: the server turns it into
// error_body() with this status. Anything else a handler throws becomes a 500.
class HttpError : public std::runtime_error {
 public:
  HttpError(int status, std::string message, std::string type = {}, std::string param = {})
      : std::runtime_error(std::move(message)), status(status), type(std::move(type)), param(std::move(param)) {}
  int status;
  std::string type;
  std::string param;
};

// Parses a request body that must be a JSON object; throws HttpError(400) saying
// what is wrong and where.
boost::json::object parse_json_object(std::string_view body);

}  // namespace inferd::daemon
