#include "daemon/api_key.hpp"

#include <cctype>

#include "daemon/http_server.hpp"
#include "daemon/json_error.hpp"

namespace inferd::daemon {
namespace {

bool same_secret(std::string_view given, std::string_view expected) {
  unsigned diff = given.size() != expected.size() ? 1u : 0u;
  for (size_t i = 0; i < expected.size(); ++i) {
    const unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff |= g ^ static_cast<unsigned char>(expected[i]);
  }
  return diff == 0;
}

bool iequals_prefix(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(s[i])) != prefix[i]) return false;
  return true;
}

}  // namespace

bool has_api_key(const Request& req, std::string_view expected) {
  std::string_view auth = req.header("Authorization");
  std::string_view key;
  if (iequals_prefix(auth, "bearer ")) {
    key = auth.substr(7);
    while (!key.empty() && key.front() == ' ') key.remove_prefix(1);
  }
  return same_secret(key, expected);
}

void require_api_key(const Request& req, std::string_view expected) {
  if (expected.empty() || has_api_key(req, expected)) return;
  throw HttpError(401, req.header("Authorization").empty()
                           ? "an API key is required: send \"Authorization: Bearer <key>\""
                           : "the API key is not valid");
}

}  // namespace inferd::daemon
