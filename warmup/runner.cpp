#include "warmup/runner.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/engine.hpp"
#include "faults/fault_points.hpp"
#include "kernels/launch_keys.hpp"
#include "engine/tokenizer.hpp"

namespace inferd::warmup {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kFiller =
    " The engine warms every kernel shape that real traffic can reach before the endpoint opens: prefill chunks"
    " of every size, decode batches of every width, and attention over short and long contexts alike. A B-tree"
    " keeps its keys sorted in wide nodes so that lookups, inserts and deletes touch few pages; nodes split when"
    " full and merge when sparse, and the tree stays balanced because it grows at the root.";

constexpr int kSlowestShown = 5;

// Prompts of exact token counts that differ within their first few tokens, so no
// run or request shares a cached prefix block with another.
class PromptMaker {
 public:
  explicit PromptMaker(const engine::Tokenizer& tok) : tok_(tok), filler_(tok.encode(kFiller, false, false)) {
    static std::atomic<uint64_t> runs{0};
    run_ = ++runs;
    nonce_ = static_cast<uint64_t>(Clock::now().time_since_epoch().count()) % 100000;
  }

  std::vector<int32_t> make(int phase, int request, int n) const {
    std::vector<int32_t> ids =
        tok_.encode(fmt::format("{}/{}/{}.{} warm-up:", request, phase, run_, nonce_), false, false);
    for (size_t i = 0; ids.size() < static_cast<size_t>(n); ++i) ids.push_back(filler_[i % filler_.size()]);
    ids.resize(n);
    return ids;
  }

 private:
  const engine::Tokenizer& tok_;
  std::vector<int32_t> filler_;
  uint64_t run_ = 0, nonce_ = 0;
};

// The requests of one phase in flight: their sinks report here.
struct Tracker {
  std::mutex mu;
  std::condition_variable cv;
  int finished = 0;
  int completed = 0;
  std::string error;

  void done(const WarmRequest& want, const engine::Delta& d) {
    std::lock_guard lk(mu);
    ++finished;
    if (d.finish == engine::FinishReason::Length && d.usage.completion_tokens == want.max_tokens &&
        d.usage.prompt_tokens == want.prompt_tokens) {
      ++completed;
    } else if (error.empty()) {
      error = fmt::format("a request of {} prompt tokens ended {} with {} of {} tokens{}{}", want.prompt_tokens,
                          engine::to_string(d.finish), d.usage.completion_tokens, want.max_tokens,
                          d.error.empty() ? "" : ": ", d.error);
    }
    cv.notify_all();
  }
};

PhaseReport run_phase(engine::Engine& eng, const PromptMaker& prompts, int index, const Phase& phase,
                      const WarmupOptions& opts, const Progress& progress, const std::function<bool()>& stopping) {
  PhaseReport rep{phase.name, phase.requests(), 0, 0, {}};
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(opts.phase_timeout_s));
  // Shared with the sinks: a cancelled request may end after this phase returns.
  auto trp = std::make_shared<Tracker>();
  Tracker& tr = *trp;
  std::vector<std::shared_ptr<engine::RequestHandle>> handles;
  const int total = rep.requests;
  if (progress) progress(index, phase.name, 0, total);

  // Waits until `target` requests finished; false on timeout, stop or failure.
  auto wait_for = [&](int target) {
    std::unique_lock lk(tr.mu);
    while (tr.finished < target && tr.error.empty()) {
      if (stopping && stopping()) {
        tr.error = "the daemon is stopping";
        break;
      }
      if (Clock::now() > deadline) {
        tr.error = fmt::format("timed out after {:.0f} s with {} of {} requests done", opts.phase_timeout_s,
                               tr.finished, total);
        break;
      }
      tr.cv.wait_for(lk, std::chrono::milliseconds(100));
      if (progress) {
        const int done = tr.finished;
        lk.unlock();
        progress(index, phase.name, done, total);
        lk.lock();
      }
    }
    return tr.error.empty();
  };

  // A wave goes to the engine in one piece, so its requests start in the same step.
  int submitted = 0;
  auto submit = [&](const Wave& wave) {
    std::vector<engine::GenerationRequest> reqs;
    for (const WarmRequest& want : wave) {
      engine::GenerationRequest req;
      req.id = fmt::format("warmup-{}-{}", phase.name, submitted);
      req.prompt = prompts.make(index, submitted++, want.prompt_tokens);
      req.max_tokens = want.max_tokens;
      req.ignore_eos = true;
      req.sampling.temperature = 0;
      req.speculate = false;  // one token per decode step, as the plan counts them
      req.unwritten_prefix = want.unwritten_prefix;
      req.sink = [trp, want](engine::Delta&& d) {
        if (d.finish != engine::FinishReason::None) trp->done(want, d);
      };
      reqs.push_back(std::move(req));
    }
    for (auto& h : eng.submit_together(std::move(reqs))) handles.push_back(std::move(h));
  };

  bool ok = true;
  try {
    for (size_t w = 0; w < phase.waves.size() && ok; ++w) {
      submit(phase.waves[w]);
      ok = wait_for(submitted);
    }
  } catch (const std::exception& e) {
    std::lock_guard lk(tr.mu);
    tr.error = fmt::format("submit failed: {}", e.what());
    ok = false;
  }
  if (!ok)
    for (auto& h : handles) h->cancel();
  static faults::FaultPoint fail("warmup.fail");
  {
    std::lock_guard lk(tr.mu);
    rep.completed = tr.completed;
    rep.error = tr.error;
  }
  if (rep.error.empty() && fail.armed() && fail.value() == phase.name)
    rep.error = "failed by fault point warmup.fail";
  rep.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return rep;
}

}  // namespace

Coverage measure_coverage(const std::vector<kernels::ShapeKey>& reachable) {
  std::set<std::string> touched;
  for (const auto& [key, use] : kernels::ShapeRegistry::global().snapshot()) touched.insert(key.str());
  Coverage c;
  c.total = reachable.size();
  for (const auto& key : reachable) {
    if (touched.count(key.str())) ++c.covered;
    else c.missing.push_back(key);
  }
  return c;
}

std::string uncovered_text(size_t missing, size_t total, const std::vector<std::string>& first_names) {
  return fmt::format("{} of {} reachable shape keys were not touched: {}{}", missing, total,
                     fmt::join(first_names, ", "), missing > first_names.size() ? ", ..." : "");
}

std::string Coverage::failure() const {
  if (missing.empty()) return "";
  std::vector<std::string> names;
  for (size_t i = 0; i < missing.size() && i < 8; ++i) names.push_back(missing[i].str());
  return uncovered_text(missing.size(), total, names);
}

Report run_plan(engine::Engine& eng, const Plan& plan, const std::vector<kernels::ShapeKey>& reachable,
                const WarmupOptions& opts, const Progress& progress, const std::function<bool()>& stopping) {
  Report report;
  const auto start = Clock::now();
  // Coverage is this run's alone: keys touched by an earlier run (a failed
  // attempt, the start-up warm-up before a re-warm) must not open the gate.
  kernels::ShapeRegistry::global().clear();
  // A speculative draft model's forwards are not in any request's steps (the
  // warm-up's requests do not speculate): it runs its own over the axes.
  try {
    eng.warm_proposer();
  } catch (const std::exception& e) {
    report.failure = std::string("the speculative proposer's warm-up failed: ") + e.what();
  }
  const PromptMaker prompts(eng.tokenizer());
  for (size_t i = 0; i < plan.phases.size() && report.passed(); ++i) {
    report.phases.push_back(run_phase(eng, prompts, static_cast<int>(i), plan.phases[i], opts, progress, stopping));
    const PhaseReport& ph = report.phases.back();
    if (!ph.error.empty()) {
      report.failure = fmt::format("phase {} {} failed: {}", i + 1, ph.name, ph.error);
      break;
    }
  }

  Coverage c = measure_coverage(reachable);
  report.keys_total = c.total;
  report.keys_covered = c.covered;
  if (report.passed()) report.failure = c.failure();
  report.missing = std::move(c.missing);
  auto uses = kernels::ShapeRegistry::global().snapshot();
  std::sort(uses.begin(), uses.end(), [](const auto& a, const auto& b) { return a.second.first_cost_s > b.second.first_cost_s; });
  for (size_t i = 0; i < uses.size() && i < kSlowestShown; ++i) report.slowest.emplace_back(uses[i].first, uses[i].second.first_cost_s);
  const std::string capture = kernels::launch_keys::graph_capture(0).key().op;
  for (const auto& [key, use] : uses)
    if (key.op == capture) report.capture_seconds += use.first_cost_s;
  report.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return report;
}

std::string summarize(const Report& r) {
  std::string out;
  for (const auto& ph : r.phases)
    out += fmt::format("{} {}/{} requests in {:.2f} s{}{}; ", ph.name, ph.completed, ph.requests, ph.seconds,
                       ph.error.empty() ? "" : ": ", ph.error);
  out += fmt::format("keys {}/{}; total {:.2f} s", r.keys_covered, r.keys_total, r.seconds);
  if (r.capture_seconds > 0)
    out += fmt::format(" ({:.2f} s recording captured steps, {:.0f}%)", r.capture_seconds,
                       100 * r.capture_seconds / std::max(r.seconds, 1e-9));
  if (!r.slowest.empty()) {
    out += "; slowest first uses:";
    for (const auto& [key, s] : r.slowest) out += fmt::format(" {} {:.1f} ms", key.str(), s * 1e3);
  }
  return out;
}

}  // namespace inferd::warmup
