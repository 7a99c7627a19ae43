#include "fabric/sysfs.hpp"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <system_error>

namespace inferd::fabric {

namespace fs = std::filesystem;

namespace {

// The file's first line without surrounding blanks; nullopt when it cannot be read
// (sysfs answers EINVAL for the attributes of an empty GID slot).
std::optional<std::string> read_line(const fs::path& p) {
  std::ifstream in(p);
  if (!in) return std::nullopt;
  std::string line;
  std::getline(in, line);
  if (in.bad()) return std::nullopt;
  const auto first = line.find_first_not_of(" \t\r");
  if (first == std::string::npos) return std::string();
  return line.substr(first, line.find_last_not_of(" \t\r") - first + 1);
}

std::optional<int64_t> to_int(std::string_view s) {
  int64_t n = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return n;
}

// Directory entries sorted by name (numerically when both are numbers), so a
// table reads the same whatever order the filesystem lists them in.
std::vector<fs::path> sorted_entries(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) out.push_back(it->path());
  std::sort(out.begin(), out.end(), [](const fs::path& a, const fs::path& b) {
    const auto na = to_int(a.filename().string()), nb = to_int(b.filename().string());
    if (na && nb) return *na < *nb;
    return a.filename() < b.filename();
  });
  return out;
}

std::map<std::string, uint64_t> read_counters(const fs::path& dir) {
  std::map<std::string, uint64_t> out;
  for (const fs::path& p : sorted_entries(dir)) {
    const auto text = read_line(p);
    if (!text) continue;
    uint64_t n = 0;
    auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), n);
    if (ec == std::errc() && end == text->data() + text->size() && !text->empty()) out[p.filename().string()] = n;
  }
  return out;
}

bool zero_gid(const std::string& gid) {
  return std::all_of(gid.begin(), gid.end(), [](char c) { return c == '0' || c == ':'; });
}

Port read_port(const std::string& device, int number, const fs::path& dir) {
  Port p;
  p.device = device;
  p.port = number;
  std::tie(p.state_code, p.state) = parse_numbered(read_line(dir / "state").value_or(""));
  p.phys_state = parse_numbered(read_line(dir / "phys_state").value_or("")).second;
  p.rate = read_line(dir / "rate").value_or("");
  p.link_layer = read_line(dir / "link_layer").value_or("");
  for (const fs::path& g : sorted_entries(dir / "gids")) {
    const auto index = to_int(g.filename().string());
    const auto gid = read_line(g);
    if (!index || !gid || gid->empty() || zero_gid(*gid)) continue;
    const std::string i = g.filename().string();
    p.gids.push_back({static_cast<int>(*index), *gid, read_line(dir / "gid_attrs" / "types" / i).value_or(""),
                      read_line(dir / "gid_attrs" / "ndevs" / i).value_or("")});
  }
  p.counters = read_counters(dir / "counters");
  p.hw_counters = read_counters(dir / "hw_counters");
  return p;
}

}  // namespace

std::pair<int, std::string> parse_numbered(const std::string& text) {
  const auto colon = text.find(':');
  if (colon == std::string::npos) return {0, text};
  const auto n = to_int(text.substr(0, colon));
  if (!n) return {0, text};
  std::string rest = text.substr(colon + 1);
  rest.erase(0, rest.find_first_not_of(' '));
  return {static_cast<int>(*n), rest};
}

FabricTable read_sysfs(const std::string& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) throw std::runtime_error("sysfs root " + root + ": not a directory");
  FabricTable t;
  for (const fs::path& dev : sorted_entries(fs::path(root) / "class" / "infiniband")) {
    for (const fs::path& port : sorted_entries(dev / "ports")) {
      const auto n = to_int(port.filename().string());
      if (!n) continue;
      t.ports.push_back(read_port(dev.filename().string(), static_cast<int>(*n), port));
    }
  }
  for (const Port& p : t.ports) {
    for (const GidEntry& g : p.gids) {
      if (g.ndev.empty() || t.interfaces.count(g.ndev)) continue;
      const fs::path net = fs::path(root) / "class" / "net" / g.ndev;
      NetInterface ni{g.ndev, static_cast<int>(to_int(read_line(net / "mtu").value_or("")).value_or(0)),
                      read_line(net / "operstate").value_or("")};
      t.interfaces[g.ndev] = ni;
    }
  }
  return t;
}

}  // namespace inferd::fabric
