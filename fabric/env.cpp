#include "fabric/env.hpp"

#include <charconv>
#include <cstdlib>

#include <fmt/format.h>

namespace inferd::fabric {

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= s.size()) {
    const size_t end = std::min(s.find(sep, at), s.size());
    if (end > at) out.push_back(s.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

// NCCL's list syntax (NCCL_SOCKET_IFNAME, NCCL_IB_HCA): "^a,b" excludes names
// starting with a or b, "=a,b" allows exactly a or b, "a,b" allows names
// starting with a or b. An HCA item may carry ":port".
bool nccl_list_allows(const std::string& list, const std::string& name, int port) {
  std::string items = list;
  const bool exclude = items.starts_with('^');
  const bool exact = items.starts_with('=');
  if (exclude || exact) items.erase(0, 1);
  bool hit = false;
  for (const std::string& item : split(items, ',')) {
    std::string n = item;
    int p = 0;
    if (auto colon = item.find(':'); colon != std::string::npos && port > 0) {
      n = item.substr(0, colon);
      std::from_chars(item.data() + colon + 1, item.data() + item.size(), p);
    }
    const bool name_ok = exact ? name == n : name.starts_with(n);
    if (name_ok && (p == 0 || p == port)) hit = true;
  }
  return exclude ? !hit : hit;
}

std::string gid_problem(const std::string& set, const Choice& c, const Port& port) {
  int index = -1;
  auto [end, ec] = std::from_chars(set.data(), set.data() + set.size(), index);
  if (ec != std::errc() || end != set.data() + set.size() || index < 0)
    return fmt::format("NCCL_IB_GID_INDEX={} is not a GID index; the fabric says {}", set, c.gid_index);
  if (index == c.gid_index) return {};
  const std::string right = fmt::format("index {} is the RoCE v2 entry for {}", c.gid_index, c.address);
  const GidEntry* g = port.gid(index);
  if (g == nullptr)
    return fmt::format("NCCL_IB_GID_INDEX={}: {} port {} has no GID at index {}; {}", index, c.device, c.port, index,
                       right);
  if (!is_roce_v2(*g))
    return fmt::format("NCCL_IB_GID_INDEX={} points at the {} entry for {} on {} port {}; {}", index,
                       g->type.empty() ? "untyped" : g->type, gid_address(g->gid), c.device, c.port, right);
  return fmt::format("NCCL_IB_GID_INDEX={} is the RoCE v2 entry for {} on {} port {}, not this node's address on the "
                     "master's network; {}",
                     index, gid_address(g->gid), c.device, c.port, right);
}

std::string socket_problem(const std::string& name, const std::string& set, const std::string& interface) {
  if (name == "NCCL_SOCKET_IFNAME" && !nccl_list_allows(set, interface, 0))
    return fmt::format("NCCL_SOCKET_IFNAME={} does not select {}, the interface on the master's network", set,
                       interface);
  if (name == "GLOO_SOCKET_IFNAME" && set != interface)
    return fmt::format("GLOO_SOCKET_IFNAME={} is not {}, the interface on the master's network", set, interface);
  return {};
}

}  // namespace

std::vector<EnvCheck> check_socket_env(const SocketChoice& socket, const std::map<std::string, std::string>& env) {
  std::vector<EnvCheck> out = {{"NCCL_SOCKET_IFNAME", socket.interface, {}, {}},
                               {"GLOO_SOCKET_IFNAME", socket.interface, {}, {}}};
  for (EnvCheck& e : out) {
    auto it = env.find(e.name);
    if (it == env.end()) continue;
    e.operator_value = it->second;
    e.problem = socket_problem(e.name, it->second, socket.interface);
  }
  return out;
}

const std::vector<std::string>& env_names() {
  static const std::vector<std::string> names = {"NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME",
                                                 "NCCL_IB_HCA",        "NCCL_IB_GID_INDEX",
                                                 "UCX_MEM_MMAP_HOOK_MODE", "UCX_RCACHE_MAX_UNRELEASED"};
  return names;
}

std::vector<EnvCheck> check_env(const Choice& c, const Port& port, const std::map<std::string, std::string>& env) {
  const std::string hca = fmt::format("{}:{}", c.device, c.port);
  std::vector<EnvCheck> out = {
      {"NCCL_SOCKET_IFNAME", c.interface, {}, {}},
      {"GLOO_SOCKET_IFNAME", c.interface, {}, {}},
      {"NCCL_IB_HCA", hca, {}, {}},
      {"NCCL_IB_GID_INDEX", std::to_string(c.gid_index), {}, {}},
      // UCX's registration cache grows with every request unless its mmap hooks
      // are off and the unreleased regions are bounded.
      {"UCX_MEM_MMAP_HOOK_MODE", "none", {}, {}},
      {"UCX_RCACHE_MAX_UNRELEASED", "1024", {}, {}},
  };
  for (EnvCheck& e : out) {
    auto it = env.find(e.name);
    if (it == env.end()) continue;
    e.operator_value = it->second;
    const std::string& set = it->second;
    if (e.name == "NCCL_SOCKET_IFNAME" || e.name == "GLOO_SOCKET_IFNAME") {
      e.problem = socket_problem(e.name, set, c.interface);
    } else if (e.name == "NCCL_IB_HCA" && !nccl_list_allows(set, c.device, c.port)) {
      e.problem = fmt::format("NCCL_IB_HCA={} does not select {}, the port on the master's network", set, hca);
    } else if (e.name == "NCCL_IB_GID_INDEX") {
      e.problem = gid_problem(set, c, port);
    } else if (e.name == "UCX_MEM_MMAP_HOOK_MODE" && set != "none") {
      e.problem = fmt::format("UCX_MEM_MMAP_HOOK_MODE={} lets UCX's registration cache grow with every request; "
                              "set it to none",
                              set);
    } else if (e.name == "UCX_RCACHE_MAX_UNRELEASED") {
      long n = -1;
      auto [end, ec] = std::from_chars(set.data(), set.data() + set.size(), n);
      if (ec != std::errc() || end != set.data() + set.size() || n < 0 || n > 1024)
        e.problem = fmt::format("UCX_RCACHE_MAX_UNRELEASED={} does not bound UCX's registration cache; set it to "
                                "1024 or less",
                                set);
    }
  }
  return out;
}

std::map<std::string, std::string> process_env() {
  std::map<std::string, std::string> out;
  for (const std::string& name : env_names())
    if (const char* v = std::getenv(name.c_str())) out[name] = v;
  return out;
}

std::vector<std::string> export_env(const std::vector<EnvCheck>& checks) {
  std::vector<std::string> out;
  for (const EnvCheck& e : checks) {
    if (e.operator_value) continue;
    ::setenv(e.name.c_str(), e.value.c_str(), 0);
    out.push_back(e.name + "=" + e.value);
  }
  return out;
}

}  // namespace inferd::fabric
