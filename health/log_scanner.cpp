#include "health/log_scanner.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <stdexcept>

#include <spdlog/spdlog.h>

namespace inferd::health {

std::vector<LogPattern> default_log_patterns() {
  return {
      {"nccl", "NCCL WARN", Level::Warn},
      {"nccl", "NCCL.*(error|Error)", Level::Shed},
      {"ucx", "UCX +ERROR", Level::Shed},
      {"ucx", "UCX +WARN.*rcache", Level::Warn},
      {"ucx", "ucp_.*leak", Level::Warn},
      {"ucx", "registration cache", Level::Warn},
      {"cuda", "CUDA error", Level::Critical},
      {"cuda", "cudaError", Level::Critical},
      {"cuda", "CUBLAS_STATUS_", Level::Critical},
      {"ibverbs", "ibv_.*failed", Level::Shed},
      {"ibverbs", "mlx5.*error", Level::Shed},
      {"oom", "Out of memory", Level::Critical},
      {"oom", "oom-kill", Level::Critical},
      {"oom", "Killed process", Level::Critical},
  };
}

struct LogScanner::Compiled {
  pcre2_code* code = nullptr;
  std::size_t category = 0;
  Level level = Level::Ok;
  ~Compiled() { pcre2_code_free(code); }
};

LogScanner::LogScanner(LogScannerOptions options) : max_kept_line_(options.max_kept_line) {
  for (const LogPattern& p : options.patterns) {
    auto c = std::make_unique<Compiled>();
    int err = 0;
    PCRE2_SIZE offset = 0;
    c->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.regex.data()), p.regex.size(), 0, &err, &offset, nullptr);
    if (!c->code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      throw std::invalid_argument("log pattern '" + p.regex + "' (" + p.category + "): " +
                                  reinterpret_cast<const char*>(msg));
    }
    pcre2_jit_compile(c->code, PCRE2_JIT_COMPLETE);  // an optimisation: the interpreter works too
    const auto it = std::find_if(categories_.begin(), categories_.end(),
                                 [&](const Category& cat) { return cat.count.category == p.category; });
    c->category = static_cast<std::size_t>(it - categories_.begin());
    if (it == categories_.end()) categories_.push_back({LogCount{p.category, 0, 0, {}}, 0, Level::Ok});
    c->level = p.level;
    compiled_.push_back(std::move(c));
  }
}

LogScanner::~LogScanner() = default;

bool LogScanner::scan(std::string_view line) {
  // Match outside the lock: compiled patterns are shareable, match data is not.
  // One ovector pair suffices: only whether a pattern matched matters.
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(pcre2_match_data_create(1, nullptr),
                                                                          &pcre2_match_data_free);
  std::vector<Level> hit(categories_.size(), Level::Ok);
  std::vector<bool> matched(categories_.size(), false);
  bool any = false;
  for (const auto& c : compiled_) {
    if (matched[c->category] && hit[c->category] >= c->level) continue;
    const int rc =
        pcre2_match(c->code, reinterpret_cast<PCRE2_SPTR>(line.data()), line.size(), 0, 0, md.get(), nullptr);
    if (rc < 0) continue;  // 0 is a match whose groups did not fit, still a match
    matched[c->category] = true;
    hit[c->category] = worst(hit[c->category], c->level);
    any = true;
  }
  if (!any) return false;
  std::lock_guard lock(mu_);
  for (std::size_t i = 0; i < categories_.size(); ++i) {
    if (!matched[i]) continue;
    Category& cat = categories_[i];
    cat.count.last_line.assign(line.substr(0, max_kept_line_));
    if (baseline_marked_) {
      ++cat.count.after_baseline;
      cat.level = worst(cat.level, hit[i]);
    } else {
      ++cat.count.before_baseline;
    }
  }
  return true;
}

void LogScanner::mark_baseline() {
  std::lock_guard lock(mu_);
  for (Category& cat : categories_) {
    cat.count.before_baseline += cat.count.after_baseline;
    cat.count.after_baseline = 0;
    cat.sampled = 0;
    cat.level = Level::Ok;
  }
  baseline_marked_ = true;
}

bool LogScanner::baseline_marked() const {
  std::lock_guard lock(mu_);
  return baseline_marked_;
}

std::vector<LogCount> LogScanner::counts() const {
  std::lock_guard lock(mu_);
  std::vector<LogCount> out;
  for (const Category& cat : categories_) out.push_back(cat.count);
  return out;
}

uint64_t LogScanner::errors_after_baseline() const {
  std::lock_guard lock(mu_);
  uint64_t n = 0;
  for (const Category& cat : categories_) n += cat.count.after_baseline;
  return n;
}

LogObservation LogScanner::sample() {
  LogObservation obs;
  obs.signal.monitor = "log";
  std::lock_guard lock(mu_);
  for (Category& cat : categories_) {
    obs.counts.push_back(cat.count);
    const uint64_t fresh = cat.count.after_baseline - cat.sampled;
    if (fresh > 0 && cat.level > obs.signal.level) {
      obs.signal.level = cat.level;
      // Not the line itself: the reason gets logged to stderr, where the line
      // would match again.
      obs.signal.reason = fmt::format("{} new {} line(s) since the last check ({} since the baseline)", fresh,
                                      cat.count.category, cat.count.after_baseline);
    }
    cat.sampled = cat.count.after_baseline;
    cat.level = Level::Ok;
  }
  if (obs.signal.level == Level::Ok)
    obs.signal.reason = baseline_marked_ ? "no new error lines" : "baseline not marked yet";
  return obs;
}

}  // namespace inferd::health
