// Runs a warm-up plan through the engine's own request path (submit: scheduler,
// sampling, detokenization) and judges it: every request must finish with exactly
// the tokens asked for, every phase within its timeout, and every reachable shape
// key must have been touched by this run (run_plan clears the global shape
// registry's touched set first). Re-runnable: each run's prompts are new, so the
// prefix cache cannot skip the work.
#pragma once
#include <atomic>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/shape_registry.hpp"
#include "warmup/plan.hpp"

namespace inferd::engine {
class Engine;
}

namespace inferd::warmup {

struct PhaseReport {
  std::string name;
  int requests = 0;
  int completed = 0;   // finished with the expected token counts
  double seconds = 0;
  std::string error;   // empty when the phase passed
};

struct Report {
  std::vector<PhaseReport> phases;
  size_t keys_total = 0;
  size_t keys_covered = 0;
  std::vector<kernels::ShapeKey> missing;                    // reachable, never touched
  std::vector<std::pair<kernels::ShapeKey, double>> slowest;  // costliest first uses
  double seconds = 0;
  // Of `seconds`, the first recording of each captured step size (capture,
  // instantiation and its first run): what CUDA graphs add to a warm-up.
  double capture_seconds = 0;
  std::string failure;  // why the gate stays closed; empty when it opens
  bool passed() const { return failure.empty(); }
};

// What this process has touched of `reachable` since the shape registry was
// last cleared (a worker rank measures its own after the head's run).
struct Coverage {
  size_t total = 0;
  size_t covered = 0;
  std::vector<kernels::ShapeKey> missing;
  // "3 of 120 reachable shape keys were not touched: a, b, c"; empty when none is missing.
  std::string failure() const;
};
Coverage measure_coverage(const std::vector<kernels::ShapeKey>& reachable);
// "3 of 120 reachable shape keys were not touched: a, b, c, ..." from the count
// not touched, the total and the first few names (a worker reports only those).
std::string uncovered_text(size_t missing, size_t total, const std::vector<std::string>& first_names);

// Called as the run advances: phase index (0-based), its name, requests done and total.
using Progress = std::function<void(int phase, const std::string& name, int done, int total)>;

// `stopping` is polled: a run that should give up (the daemon drains) fails soon.
// The fault point "warmup.fail" armed with a phase's name fails that phase.
Report run_plan(engine::Engine& engine, const Plan& plan, const std::vector<kernels::ShapeKey>& reachable,
                const WarmupOptions& opts, const Progress& progress = {},
                const std::function<bool()>& stopping = {});

// One line per phase plus the coverage and the slowest first uses, for the log.
std::string summarize(const Report& report);

}  // namespace inferd::warmup
