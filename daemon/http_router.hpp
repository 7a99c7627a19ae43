// Which handler answers a request: routes by method and path, the exact path
// first, then the longest registered prefix.
#pragma once
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "daemon/http_server.hpp"

namespace inferd::daemon {

struct Route {
  std::string pattern;  // the metrics label: the path, or the prefix followed by '*'
  Handler handler;
  RouteOptions options;
};

class Router {
 public:
  // Both throw std::invalid_argument unless the path starts with '/'.
  void add(std::string method, std::string path, Handler handler, RouteOptions options);
  void add_prefix(std::string method, std::string prefix, Handler handler, RouteOptions options);

  struct Match {
    const Route* route = nullptr;       // null: no route for this method and path
    std::string pattern = "unmatched";  // the route's label once the path is known
    std::string allow;                  // the path's methods when it is known but not for this one

    // 405 with Allow when the path is known, else 404. Only when route is null.
    Response refusal(std::string_view method, std::string_view path) const;
  };
  // Only routes served on this listener (`admin`: the admin one) match.
  Match match(std::string_view method, std::string_view path, bool admin) const;

 private:
  using ByMethod = std::map<std::string, Route, std::less<>>;
  std::map<std::string, ByMethod, std::less<>> exact_;
  std::vector<std::pair<std::string, ByMethod>> prefixes_;  // longest first
};

}  // namespace inferd::daemon
