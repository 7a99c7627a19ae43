#include "daemon/http_router.hpp"

#include <algorithm>
#include <stdexcept>

namespace inferd::daemon {

namespace {

void require_absolute(const std::string& path) {
  if (path.empty() || path[0] != '/') throw std::invalid_argument("route path must start with '/': " + path);
}

bool serves(Listeners listeners, bool admin) {
  return listeners == Listeners::Both || (listeners == Listeners::Admin) == admin;
}

}  // namespace

void Router::add(std::string method, std::string path, Handler handler, RouteOptions options) {
  require_absolute(path);
  exact_[path][std::move(method)] = Route{path, std::move(handler), options};
}

void Router::add_prefix(std::string method, std::string prefix, Handler handler, RouteOptions options) {
  require_absolute(prefix);
  auto it = std::find_if(prefixes_.begin(), prefixes_.end(), [&](const auto& p) { return p.first == prefix; });
  if (it == prefixes_.end()) {
    prefixes_.emplace_back(prefix, ByMethod{});
    it = prefixes_.end() - 1;
  }
  it->second[std::move(method)] = Route{prefix + "*", std::move(handler), options};
  std::stable_sort(prefixes_.begin(), prefixes_.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
}

Router::Match Router::match(std::string_view method, std::string_view path, bool admin) const {
  const ByMethod* by_method = nullptr;
  if (auto it = exact_.find(path); it != exact_.end()) {
    by_method = &it->second;
  } else {
    auto p = std::find_if(prefixes_.begin(), prefixes_.end(), [&](const auto& e) { return path.starts_with(e.first); });
    if (p != prefixes_.end()) by_method = &p->second;
  }
  Match m;
  if (!by_method) return m;
  for (const auto& [verb, route] : *by_method) {
    if (!serves(route.options.listeners, admin)) continue;
    m.pattern = route.pattern;
    if (verb == method) m.route = &route;
    m.allow += (m.allow.empty() ? "" : ", ") + verb;
  }
  if (m.route) m.allow.clear();
  return m;
}

Response Router::Match::refusal(std::string_view method, std::string_view path) const {
  if (allow.empty()) return Response::error(404, "no route for " + std::string(path), "not_found_error");
  Response r = Response::error(405, "method " + std::string(method) + " is not allowed for " + std::string(path));
  r.headers.emplace_back("Allow", allow);
  return r;
}

}  // namespace inferd::daemon
