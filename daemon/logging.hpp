// Logging through spdlog: to the journal with structured fields (PRIORITY,
// INFERD_STATE, INFERD_REQUEST_ID, and those of a ScopedLogFields) when running
// under systemd, to stderr otherwise (the original stderr, not the pipe the
// supervisor scans).
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <spdlog/common.h>

#include "daemon/config.hpp"

namespace inferd::daemon {

class Lifecycle;

// "info" -> spdlog::level::info; empty for names LogConfig does not accept.
std::optional<spdlog::level::level_enum> parse_log_level(std::string_view name);

// True when stderr is the journal stream systemd gave us ($JOURNAL_STREAM names
// stderr's device and inode).
bool stderr_is_journal();

// Installs the default logger for `cfg` (target and level). Returns the target
// chosen ("stderr" or "journald"). Call it before anything replaces fd 2: the
// log writes to the stderr it finds then, so the supervisor's stderr pipe sees
// only what libraries write, never the daemon's own records.
std::string init_logging(const LogConfig& cfg);

// Applies a new level to the running logger.
void set_log_level(spdlog::level::level_enum level);

// The lifecycle whose state log records carry (INFERD_STATE); nullptr detaches it.
void set_log_lifecycle(const Lifecycle* lifecycle);

// Tags every record logged by this thread while it lives with a request id.
class ScopedRequestId {
 public:
  explicit ScopedRequestId(std::string id);
  ~ScopedRequestId();
  ScopedRequestId(const ScopedRequestId&) = delete;
  ScopedRequestId& operator=(const ScopedRequestId&) = delete;

 private:
  std::string previous_;
};

// The request id of this thread's current scope, "" when none.
std::string_view current_request_id();

// Tags every record logged by this thread while it lives with fields: in the
// journal as INFERD_<NAME>=value (so `journalctl INFERD_ACTION=recover` selects
// the supervisor's decisions), on stderr as "[name=value ...] ". Names are
// lower-case words; scopes nest.
class ScopedLogFields {
 public:
  using Fields = std::vector<std::pair<std::string, std::string>>;
  explicit ScopedLogFields(const Fields& fields);
  ~ScopedLogFields();
  ScopedLogFields(const ScopedLogFields&) = delete;
  ScopedLogFields& operator=(const ScopedLogFields&) = delete;

 private:
  size_t outer_size_;
};

// The fields of this thread's current scopes, outermost first.
const ScopedLogFields::Fields& current_log_fields();

}  // namespace inferd::daemon
