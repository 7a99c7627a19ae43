// Counts error lines (NCCL, UCX, CUDA, ibverbs, OOM) by category. Lines seen
// before mark_baseline() (start-up noise) are kept apart from those after; only
// the latter raise a signal. scan() may run on a reader thread while the
// supervisor reads counts.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "health/signal.hpp"

namespace inferd::health {

struct LogPattern {
  std::string category;
  std::string regex;          // PCRE2, searched anywhere in the line
  Level level = Level::Warn;  // signalled when it matches after the baseline
};

// NCCL, UCX, CUDA, ibverbs and OOM lines: warnings Warn, errors Shed, CUDA
// errors (sticky for the context) and OOM kills Critical.
std::vector<LogPattern> default_log_patterns();

struct LogScannerOptions {
  std::vector<LogPattern> patterns = default_log_patterns();
  std::size_t max_kept_line = 256;  // of the last matching line per category
};

struct LogCount {
  std::string category;
  uint64_t before_baseline = 0;
  uint64_t after_baseline = 0;
  std::string last_line;  // the latest match, truncated
};

struct LogObservation {
  std::vector<LogCount> counts;  // one per category, in pattern order
  // The worst level among categories that matched since the previous sample().
  Signal signal;
};

class LogScanner {
 public:
  // Throws std::invalid_argument naming a pattern that does not compile.
  explicit LogScanner(LogScannerOptions options = {});
  ~LogScanner();
  LogScanner(const LogScanner&) = delete;
  LogScanner& operator=(const LogScanner&) = delete;

  // Counts the line once in each category with a matching pattern; true if any.
  bool scan(std::string_view line);
  // Lines from now on count as after the baseline; earlier ones move to
  // before_baseline. Called after warm-up, and again after each recovery.
  void mark_baseline();
  bool baseline_marked() const;

  std::vector<LogCount> counts() const;
  uint64_t errors_after_baseline() const;
  // Counts, and a signal for post-baseline lines seen since the last call (so
  // one error line is reported once, a stream of them on every tick).
  LogObservation sample();

 private:
  struct Compiled;
  struct Category {
    LogCount count;
    uint64_t sampled = 0;     // after_baseline at the previous sample()
    Level level = Level::Ok;  // worst pattern matched since the previous sample()
  };

  std::vector<std::unique_ptr<Compiled>> compiled_;
  std::size_t max_kept_line_;
  mutable std::mutex mu_;
  std::vector<Category> categories_;
  bool baseline_marked_ = false;
};

}  // namespace inferd::health
