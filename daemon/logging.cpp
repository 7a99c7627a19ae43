#include "daemon/logging.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/ansicolor_sink.h>
#include <spdlog/spdlog.h>

#include "daemon/lifecycle.hpp"
#include "inferd_config.h"

#if INFERD_HAVE_SYSTEMD
#include <sys/uio.h>
#include <systemd/sd-journal.h>
#endif

namespace inferd::daemon {

namespace {

thread_local std::string t_request_id;
thread_local ScopedLogFields::Fields t_fields;
std::atomic<const Lifecycle*> g_lifecycle{nullptr};

// "%q" in the stderr pattern: "[req ID] " while a request id is in scope, then
// "[name=value ...] " while fields are.
class RequestIdFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg&, const std::tm&, spdlog::memory_buf_t& dest) override {
    auto out = std::back_inserter(dest);
    if (!t_request_id.empty()) fmt::format_to(out, "[req {}] ", t_request_id);
    if (t_fields.empty()) return;
    const char* sep = "[";
    for (const auto& [name, value] : t_fields) {
      const bool quote = value.empty() || value.find(' ') != std::string::npos;
      if (quote) fmt::format_to(out, "{}{}=\"{}\"", sep, name, value);
      else fmt::format_to(out, "{}{}={}", sep, name, value);
      sep = " ";
    }
    fmt::format_to(out, "] ");
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<RequestIdFlag>(); }
};

// Where records meant for stderr go: a copy of fd 2 taken before the
// supervisor's StderrPipe replaces it. The pipe's scanner looks for what the
// engine's libraries (CUDA, NCCL, UCX) write to fd 2; the daemon's own records
// carry text clients choose (request ids, model names, paths), so they go
// straight to the original stderr and can never raise a log-pattern signal.
FILE* log_stream() {
  static FILE* const stream = [] {
    const int fd = ::fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
    FILE* f = fd >= 0 ? ::fdopen(fd, "w") : nullptr;
    if (f == nullptr) {
      if (fd >= 0) ::close(fd);
      return stderr;  // out of descriptors at start: nothing is scanned yet either
    }
    return f;
  }();
  return stream;
}

#if INFERD_HAVE_SYSTEMD
int syslog_priority(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::critical: return 2;
    case spdlog::level::err: return 3;
    case spdlog::level::warn: return 4;
    case spdlog::level::info: return 6;
    default: return 7;
  }
}

// Sends each record to the journal as structured fields rather than a line, so
// `journalctl INFERD_STATE=Degraded` or `INFERD_REQUEST_ID=...` select records.
class JournaldSink final : public spdlog::sinks::base_sink<std::mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    std::vector<std::string> fields;
    fields.push_back(fmt::format("MESSAGE={}", std::string_view(msg.payload.data(), msg.payload.size())));
    fields.push_back(fmt::format("PRIORITY={}", syslog_priority(msg.level)));
    fields.push_back("SYSLOG_IDENTIFIER=inferd");
    if (const Lifecycle* lc = g_lifecycle.load(std::memory_order_acquire))
      fields.push_back(fmt::format("INFERD_STATE={}", to_string(lc->state())));
    if (!t_request_id.empty()) fields.push_back("INFERD_REQUEST_ID=" + t_request_id);
    for (const auto& [name, value] : t_fields) {
      std::string f = "INFERD_" + name + "=" + value;
      for (size_t i = 7; i < 7 + name.size(); ++i) f[i] = static_cast<char>(std::toupper(static_cast<unsigned char>(f[i])));
      fields.push_back(std::move(f));
    }
    std::vector<iovec> iov;
    for (auto& f : fields) iov.push_back({f.data(), f.size()});
    if (sd_journal_sendv(iov.data(), static_cast<int>(iov.size())) < 0) {
      // journald is unreachable: stderr is its stream too, and it reads a
      // "<priority>" prefix there, so the record keeps its priority.
      std::fprintf(log_stream(), "<%d>%.*s\n", syslog_priority(msg.level), static_cast<int>(msg.payload.size()),
                   msg.payload.data());
      std::fflush(log_stream());
    }
  }
  void flush_() override {}
};
#endif

std::shared_ptr<spdlog::sinks::sink> stderr_sink() {
  auto sink = std::make_shared<spdlog::sinks::ansicolor_sink<spdlog::details::console_mutex>>(
      log_stream(), spdlog::color_mode::automatic);
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<RequestIdFlag>('q').set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %q%v");
  sink->set_formatter(std::move(formatter));
  return sink;
}

}  // namespace

std::optional<spdlog::level::level_enum> parse_log_level(std::string_view name) {
  using spdlog::level::level_enum;
  if (name == "trace") return level_enum::trace;
  if (name == "debug") return level_enum::debug;
  if (name == "info") return level_enum::info;
  if (name == "warn") return level_enum::warn;
  if (name == "error") return level_enum::err;
  if (name == "critical") return level_enum::critical;
  if (name == "off") return level_enum::off;
  return std::nullopt;
}

bool stderr_is_journal() {
  const char* env = std::getenv("JOURNAL_STREAM");
  if (env == nullptr) return false;
  uintmax_t dev = 0, ino = 0;
  if (std::sscanf(env, "%" SCNuMAX ":%" SCNuMAX, &dev, &ino) != 2) return false;
  struct stat st {};
  if (fstat(STDERR_FILENO, &st) != 0) return false;
  return static_cast<uintmax_t>(st.st_dev) == dev && static_cast<uintmax_t>(st.st_ino) == ino;
}

std::string init_logging(const LogConfig& cfg) {
  log_stream();  // now, while fd 2 is still the original stderr
  bool journald = cfg.target == LogTarget::Journald || (cfg.target == LogTarget::Auto && stderr_is_journal());
  std::shared_ptr<spdlog::sinks::sink> sink;
#if INFERD_HAVE_SYSTEMD
  if (journald) sink = std::make_shared<JournaldSink>();
#else
  const bool wanted_journald = journald;
  journald = false;
#endif
  if (!sink) sink = stderr_sink();
  auto logger = std::make_shared<spdlog::logger>("inferd", std::move(sink));
  logger->set_level(parse_log_level(cfg.level).value_or(spdlog::level::info));
  logger->flush_on(spdlog::level::trace);
  spdlog::set_default_logger(std::move(logger));
#if !INFERD_HAVE_SYSTEMD
  if (wanted_journald && cfg.target == LogTarget::Journald)
    spdlog::warn("log: built without systemd support; logging to stderr instead of journald");
#endif
  return journald ? "journald" : "stderr";
}

void set_log_level(spdlog::level::level_enum level) { spdlog::set_level(level); }

void set_log_lifecycle(const Lifecycle* lifecycle) { g_lifecycle.store(lifecycle, std::memory_order_release); }

ScopedRequestId::ScopedRequestId(std::string id) : previous_(std::exchange(t_request_id, std::move(id))) {}

ScopedRequestId::~ScopedRequestId() { t_request_id = std::move(previous_); }

std::string_view current_request_id() { return t_request_id; }

ScopedLogFields::ScopedLogFields(const Fields& fields) : outer_size_(t_fields.size()) {
  t_fields.insert(t_fields.end(), fields.begin(), fields.end());
}

ScopedLogFields::~ScopedLogFields() { t_fields.resize(outer_size_); }

const ScopedLogFields::Fields& current_log_fields() { return t_fields; }

}  // namespace inferd::daemon
