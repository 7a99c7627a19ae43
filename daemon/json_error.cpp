#include "daemon/json_error.hpp"

#include <boost/json/parser.hpp>
#include <boost/json/serialize.hpp>

namespace inferd::daemon {

std::string_view error_type_for(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 408:
    case 504: return "timeout_error";
    case 429: return "rate_limit_error";
    case 503: return "service_unavailable";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

boost::json::object error_object(int status, std::string_view message, std::string_view type,
                                 std::string_view param) {
  boost::json::object err;
  err["message"] = message;
  err["type"] = type.empty() ? error_type_for(status) : type;
  err["param"] = param.empty() ? boost::json::value(nullptr) : boost::json::value(param);
  err["code"] = status;
  return err;
}

std::string error_body(int status, std::string_view message, std::string_view type, std::string_view param) {
  return boost::json::serialize(boost::json::object{{"error", error_object(status, message, type, param)}});
}

boost::json::object parse_json_object(std::string_view body) {
  if (body.empty()) throw HttpError(400, "request body is empty; expected a JSON object");
  boost::json::parser parser;
  boost::json::error_code ec;
  const size_t used = parser.write(body.data(), body.size(), ec);
  if (ec)
    throw HttpError(400, "request body is not valid JSON: " + ec.message() + " at byte " + std::to_string(used));
  boost::json::value v = parser.release();
  if (!v.is_object()) throw HttpError(400, "request body must be a JSON object");
  return std::move(v.as_object());
}

}  // namespace inferd::daemon
