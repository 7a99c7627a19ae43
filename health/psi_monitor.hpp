// Pressure stall information (/proc/pressure/{memory,cpu,io}): how much of the
// time tasks waited on a resource. Memory pressure is classified; cpu and io are
// observed only. A kernel without PSI leaves the monitor Ok and unavailable.
#pragma once
#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "health/procfs.hpp"
#include "health/signal.hpp"

namespace inferd::health {

// One "some" or "full" line: share of wall time stalled, in percent.
struct PsiLine {
  double avg10 = 0, avg60 = 0, avg300 = 0;
  uint64_t total_us = 0;
};

struct PsiResource {
  bool available = false;
  PsiLine some;
  std::optional<PsiLine> full;  // cpu lacks it on older kernels
};

// Parses the text of a pressure file; unavailable when the "some" line is
// missing or malformed, and a malformed "full" line is dropped.
PsiResource parse_pressure(std::string_view text);

// Percent stalled at which each level starts.
struct PsiThresholds {
  double warn, shed, critical;
  Level classify(double percent) const;
};

struct PsiOptions {
  PsiThresholds some_avg10{10, 20, 40};
  PsiThresholds full_avg10{5, 10, 20};
  // Sustained pressure escalates at lower values.
  PsiThresholds some_avg60{5, 10, 25};
  PsiThresholds full_avg60{2, 5, 10};
};

struct PsiObservation {
  bool available = false;  // memory pressure could be read
  PsiResource memory, cpu, io;
  Signal signal;
};

class PsiMonitor {
 public:
  explicit PsiMonitor(PsiOptions options = {}, Procfs procfs = Procfs{});

  // Reads the pressure files and classifies memory pressure.
  PsiObservation sample();

 private:
  PsiOptions options_;
  Procfs procfs_;
  bool reported_unavailable_ = false;
};

struct PsiTriggerOptions {
  std::string resource = "memory";
  std::string kind = "some";  // or "full"
  // Fires when tasks stalled this long within one window. Without
  // CAP_SYS_RESOURCE the kernel wants the window in multiples of 2 s; the
  // trigger then rounds it up, keeping the stall share.
  std::chrono::microseconds stall{150000};
  std::chrono::microseconds window{1000000};
};

// A kernel PSI trigger: an fd that wakes poll() with POLLPRI when the stall
// threshold is crossed, faster than sampling. Unavailable when the kernel refuses
// the trigger (no PSI, EPERM, EINVAL) or the root is not
// a real procfs; the caller then falls back to sampling PsiMonitor.
class PsiTrigger {
 public:
  explicit PsiTrigger(PsiTriggerOptions options = {}, Procfs procfs = Procfs{});
  ~PsiTrigger();
  PsiTrigger(PsiTrigger&& other) noexcept;
  PsiTrigger& operator=(PsiTrigger&& other) noexcept;
  PsiTrigger(const PsiTrigger&) = delete;
  PsiTrigger& operator=(const PsiTrigger&) = delete;

  bool available() const { return fd_ >= 0; }
  // Why the trigger is unavailable; empty when it is available.
  const std::string& error() const { return error_; }
  // For the caller's own poll loop (POLLPRI); -1 when unavailable.
  int fd() const { return fd_; }
  // The trigger the kernel accepted, e.g. "some 300000 2000000"; empty when unavailable.
  const std::string& trigger() const { return trigger_; }

  enum class Wait { Fired, Timeout, Unavailable };
  // Waits for the trigger up to `timeout`; an interrupted wait reports Timeout.
  Wait wait(std::chrono::milliseconds timeout) const;

 private:
  int fd_ = -1;
  std::string error_;
  std::string trigger_;
};

}  // namespace inferd::health
