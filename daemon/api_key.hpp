// Bearer-token checks shared by every route that an API key protects.
#pragma once
#include <string_view>

namespace inferd::daemon {

struct Request;

// True when `Authorization: Bearer <key>` carries `expected` (scheme case-insensitive).
// The comparison takes time that depends only on the expected key's length, so
// response timing does not reveal how much of a guess was right.
bool has_api_key(const Request& req, std::string_view expected);

// Throws HttpError 401 unless `expected` is empty or the request carries it.
void require_api_key(const Request& req, std::string_view expected);

}  // namespace inferd::daemon
