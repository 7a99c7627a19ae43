#include "health/psi_monitor.hpp"

#include <fcntl.h>
#include <linux/magic.h>
#include <poll.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <utility>

#include <spdlog/spdlog.h>

namespace inferd::health {

namespace {

std::string_view next_token(std::string_view& s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  std::size_t n = 0;
  while (n < s.size() && s[n] != ' ' && s[n] != '\t') ++n;
  std::string_view tok = s.substr(0, n);
  s.remove_prefix(n);
  return tok;
}

template <typename T>
bool parse_number(std::string_view s, T& out) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc{} && end == s.data() + s.size();
}

// "avg10=0.00 avg60=0.00 avg300=0.00 total=0": every field must be present.
std::optional<PsiLine> parse_line(std::string_view rest) {
  PsiLine line;
  int seen = 0;
  for (std::string_view tok = next_token(rest); !tok.empty(); tok = next_token(rest)) {
    const std::size_t eq = tok.find('=');
    if (eq == std::string_view::npos) return std::nullopt;
    const std::string_view key = tok.substr(0, eq), value = tok.substr(eq + 1);
    bool ok = true;  // a key added by a later kernel is skipped
    if (key == "avg10") {
      ok = parse_number(value, line.avg10);
      seen |= 1;
    } else if (key == "avg60") {
      ok = parse_number(value, line.avg60);
      seen |= 2;
    } else if (key == "avg300") {
      ok = parse_number(value, line.avg300);
      seen |= 4;
    } else if (key == "total") {
      ok = parse_number(value, line.total_us);
      seen |= 8;
    }
    if (!ok) return std::nullopt;
  }
  if (seen != 15) return std::nullopt;
  return line;
}

std::string percent(double v) { return fmt::format("{:.2f}%", v); }

}  // namespace

PsiResource parse_pressure(std::string_view text) {
  PsiResource r;
  while (!text.empty()) {
    std::size_t eol = text.find('\n');
    std::string_view rest = text.substr(0, eol);
    text.remove_prefix(eol == std::string_view::npos ? text.size() : eol + 1);
    const std::string_view kind = next_token(rest);
    if (kind == "some") {
      const auto line = parse_line(rest);
      if (!line) return PsiResource{};
      r.some = *line;
      r.available = true;
    } else if (kind == "full") {
      r.full = parse_line(rest);
    }
  }
  return r;
}

Level PsiThresholds::classify(double v) const {
  if (v >= critical) return Level::Critical;
  if (v >= shed) return Level::Shed;
  if (v >= warn) return Level::Warn;
  return Level::Ok;
}

PsiMonitor::PsiMonitor(PsiOptions options, Procfs procfs) : options_(options), procfs_(std::move(procfs)) {}

PsiObservation PsiMonitor::sample() {
  PsiObservation obs;
  obs.signal.monitor = "psi";
  auto read = [&](const char* name) {
    const auto text = procfs_.read(std::string("pressure/") + name);
    return text ? parse_pressure(*text) : PsiResource{};
  };
  obs.memory = read("memory");
  obs.cpu = read("cpu");
  obs.io = read("io");
  obs.available = obs.memory.available;
  if (!obs.available) {
    obs.signal.reason = "memory pressure unavailable (" + procfs_.path("pressure/memory").string() + ")";
    // Once per outage: a kernel without PSI would otherwise log every tick.
    if (!reported_unavailable_) spdlog::warn("psi: {}; relying on other monitors", obs.signal.reason);
    reported_unavailable_ = true;
    return obs;
  }
  reported_unavailable_ = false;

  auto consider = [&](const PsiThresholds& t, double value, const char* what) {
    const Level level = t.classify(value);
    if (level > obs.signal.level) {
      obs.signal.level = level;
      obs.signal.reason = fmt::format("memory {} {} >= {} threshold", what, percent(value), level_name(level));
    }
  };
  const PsiLine& some = obs.memory.some;
  consider(options_.some_avg10, some.avg10, "some avg10");
  consider(options_.some_avg60, some.avg60, "some avg60");
  if (const auto& full = obs.memory.full) {
    consider(options_.full_avg10, full->avg10, "full avg10");
    consider(options_.full_avg60, full->avg60, "full avg60");
  }
  if (obs.signal.level == Level::Ok)
    obs.signal.reason = fmt::format("memory some avg10 {}", percent(some.avg10));
  return obs;
}

PsiTrigger::PsiTrigger(PsiTriggerOptions options, Procfs procfs) {
  const auto path = procfs.path("pressure/" + options.resource);
  const int fd = ::open(path.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    error_ = fmt::format("open {}: {}", path.string(), std::strerror(errno));
    return;
  }
  // A regular file would take the write and never fire.
  struct statfs fs {};
  if (::fstatfs(fd, &fs) != 0 || fs.f_type != PROC_SUPER_MAGIC) {
    error_ = path.string() + " is not on procfs";
    ::close(fd);
    return;
  }
  auto arm = [&](std::chrono::microseconds stall, std::chrono::microseconds window) {
    trigger_ = fmt::format("{} {} {}", options.kind, stall.count(), window.count());
    // The kernel wants the terminating NUL as part of the write.
    return ::write(fd, trigger_.c_str(), trigger_.size() + 1) >= 0;
  };
  bool armed = arm(options.stall, options.window);
  // Without CAP_SYS_RESOURCE the kernel takes only windows in whole multiples of
  // 2 s (EINVAL otherwise): retry once with the window rounded up, same share.
  constexpr int64_t kStepUs = 2'000'000;
  const int64_t window_us = options.window.count();
  if (!armed && errno == EINVAL && window_us > 0 && window_us % kStepUs != 0) {
    const int64_t rounded = (window_us / kStepUs + 1) * kStepUs;
    armed = arm(options.stall * rounded / window_us, std::chrono::microseconds(rounded));
  }
  if (!armed) {
    error_ = fmt::format("trigger '{}' on {}: {}", trigger_, path.string(), std::strerror(errno));
    trigger_.clear();
    ::close(fd);
    return;
  }
  fd_ = fd;
}

PsiTrigger::~PsiTrigger() {
  if (fd_ >= 0) ::close(fd_);
}

PsiTrigger::PsiTrigger(PsiTrigger&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      error_(std::move(other.error_)),
      trigger_(std::exchange(other.trigger_, {})) {}

PsiTrigger& PsiTrigger::operator=(PsiTrigger&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    error_ = std::move(other.error_);
    trigger_ = std::exchange(other.trigger_, {});
  }
  return *this;
}

PsiTrigger::Wait PsiTrigger::wait(std::chrono::milliseconds timeout) const {
  if (fd_ < 0) return Wait::Unavailable;
  pollfd p{fd_, POLLPRI, 0};
  const int n = ::poll(&p, 1, static_cast<int>(timeout.count()));
  if (n <= 0) return Wait::Timeout;
  // POLLERR: the monitored cgroup or file went away.
  if (p.revents & (POLLERR | POLLNVAL)) return Wait::Unavailable;
  return (p.revents & POLLPRI) ? Wait::Fired : Wait::Timeout;
}

}  // namespace inferd::health
