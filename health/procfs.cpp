#include "health/procfs.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <system_error>

namespace inferd::health {

namespace {
// procfs files report size 0, so read until EOF; the cap keeps a bad root harmless.
constexpr std::size_t kMaxFile = 1 << 20;
}  // namespace

Procfs::Procfs(std::filesystem::path root) : root_(std::move(root)) {}

std::optional<std::string> Procfs::read(std::string_view relative) const {
  const int fd = ::open(path(relative).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string text;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ::close(fd);
      return std::nullopt;
    }
    if (n == 0 || text.size() >= kMaxFile) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return text;
}

std::optional<std::size_t> Procfs::count_entries(std::string_view relative) const {
  std::error_code ec;
  std::filesystem::directory_iterator it(path(relative), ec), end;
  if (ec) return std::nullopt;
  std::size_t n = 0;
  for (; it != end; it.increment(ec)) {
    if (ec) return std::nullopt;
    ++n;
  }
  return n;
}

std::optional<uint64_t> colon_field(std::string_view text, std::string_view key) {
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    if (!line.starts_with(key) || line.substr(key.size(), 1) != ":") continue;
    std::string_view rest = line.substr(key.size() + 1);
    while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t')) rest.remove_prefix(1);
    uint64_t value = 0;
    const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), value);
    if (ec != std::errc{} || end == rest.data()) return std::nullopt;
    std::string_view unit(end, static_cast<std::size_t>(rest.data() + rest.size() - end));
    while (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
    while (!unit.empty() && (unit.back() == ' ' || unit.back() == '\r')) unit.remove_suffix(1);
    if (unit.empty()) return value;
    if (unit == "kB") {
      if (value > UINT64_MAX / 1024) return std::nullopt;
      return value * 1024;
    }
    return std::nullopt;  // an unknown unit or trailing junk
  }
  return std::nullopt;
}

}  // namespace inferd::health
