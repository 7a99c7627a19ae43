// The sd_notify protocol (READY, STATUS, EXTEND_TIMEOUT_USEC, WATCHDOG,
// STOPPING). Every call is a no-op when NOTIFY_SOCKET is unset or inferd was
// built without libsystemd.
#pragma once
#include <chrono>
#include <optional>
#include <string_view>

namespace inferd::daemon {

class SystemdNotifier {
 public:
  // Reads NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID (optional) once.
  SystemdNotifier();

  bool enabled() const { return enabled_; }
  // The service's watchdog timeout, when systemd asked for pings.
  std::optional<std::chrono::microseconds> watchdog_timeout() const { return watchdog_; }

  // Sends one datagram of newline-separated assignments.
  void notify(std::string_view message) const;
  void ready() const;
  void status(std::string_view text) const;
  void extend_timeout(std::chrono::microseconds by) const;
  void watchdog() const;
  void stopping() const;

 private:
  bool enabled_ = false;
  std::optional<std::chrono::microseconds> watchdog_;
};

}  // namespace inferd::daemon
