#include "daemon/systemd_notify.hpp"

#include <cstdlib>
#include <cstring>
#include <string>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "inferd_config.h"

#if INFERD_HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

namespace inferd::daemon {

SystemdNotifier::SystemdNotifier() {
#if INFERD_HAVE_SYSTEMD
  const char* socket = std::getenv("NOTIFY_SOCKET");
  enabled_ = socket != nullptr && *socket != '\0';
  uint64_t usec = 0;
  // Honours WATCHDOG_PID when set, so a child that inherited the variables stays quiet.
  if (sd_watchdog_enabled(0, &usec) > 0 && usec > 0) watchdog_ = std::chrono::microseconds(usec);
#endif
}

void SystemdNotifier::notify(std::string_view message) const {
  if (!enabled_) return;
#if INFERD_HAVE_SYSTEMD
  const std::string text(message);
  if (int rc = sd_notify(0, text.c_str()); rc < 0)
    spdlog::warn("sd_notify '{}' failed: {}", text, std::strerror(-rc));
#endif
}

void SystemdNotifier::ready() const { notify("READY=1"); }

void SystemdNotifier::status(std::string_view text) const { notify(fmt::format("STATUS={}", text)); }

void SystemdNotifier::extend_timeout(std::chrono::microseconds by) const {
  notify(fmt::format("EXTEND_TIMEOUT_USEC={}", by.count()));
}

void SystemdNotifier::watchdog() const { notify("WATCHDOG=1"); }

void SystemdNotifier::stopping() const { notify("STOPPING=1"); }

}  // namespace inferd::daemon
