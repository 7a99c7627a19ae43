#include "engine/rank_worker.hpp"

#include <spdlog/spdlog.h>

#include "engine/executor.hpp"
#include "engine/gguf_reader.hpp"
#include "engine/hf_checkpoint.hpp"
#include "faults/fault_points.hpp"

#include <chrono>
#include <thread>

namespace inferd::engine {

RankWorker::RankWorker(const EngineOptions& opts) {
  backend_ = opts.backend ? opts.backend() : kernels::make_cpu_backend(opts.threads);
  file_ = open_model(opts.model_path);
  uint64_t weights_bytes = 0;
  model_ = load_model(*file_, *backend_, Precision::Fast,
                      [&](const LoadProgress& p) {
                        weights_bytes = p.bytes_total;
                        if (opts.on_load_progress) opts.on_load_progress(p);
                      },
                      opts.tp);
  const auto& mc = model_->config();
  max_model_len_ = resolve_max_model_len(mc, opts.max_model_len);
  // As the head does, in the same order: its group meets here to agree on the cache's size.
  kv_ = std::make_unique<KvCache>(
      plan_kv_cache(mc, max_model_len_, kv_sized_by_device(opts, *backend_, mc, max_model_len_, weights_bytes)),
      *backend_);
  // The head's graph sizes: a padded decode step must have the same width on
  // every rank, and whether a collective is captured must be the same on all.
  const auto graphs = graph_sizes_for(*backend_, opts.graph_sizes, opts.max_num_seqs, opts.max_num_batched_tokens);
  executor_ = std::make_unique<Executor>(*model_, *kv_, *backend_, graphs);
  tp_ = opts.tp;
  axes_ = shape_axes(opts.max_num_batched_tokens, opts.max_num_seqs, max_model_len_, graphs);
  const auto& g = kv_->geometry();
  spdlog::info("worker rank {} of {}: {} ({} of {} kv heads), kv cache {} blocks x {} tokens ({:.0f} MiB), {} threads",
               opts.tp.rank, opts.tp.size, mc.name, mc.kv_heads_here, mc.n_kv_heads, g.num_blocks, g.block_size,
               g.total_bytes() / 1048576.0, backend_->threads());
}

RankWorker::~RankWorker() = default;

const KvGeometry& RankWorker::kv_geometry() const { return kv_->geometry(); }

std::vector<kernels::ShapeKey> RankWorker::reachable_shape_keys() const {
  return engine::reachable_shape_keys(*file_, Precision::Fast, tp_, kv_->geometry(), axes_);
}

// Fault point "rank.cold_shape=B[:MS]": this rank's first decode step of batch
// B stalls MS ms (default 8000) before it runs, as a kernel compiled lazily on
// a shape's first use would, while its peers wait in the step's first
// all-reduce: the trap a warm-up exists for. Once per process.
void RankWorker::stall_on_cold_shape(const StepPlan& plan) {
  static const faults::FaultPoint cold("rank.cold_shape");
  if (!cold.armed() || cold_stalled_ || !plan.decode_only()) return;
  const std::string v = cold.value();
  const auto colon = v.find(':');
  const size_t batch = v.empty() ? 1 : std::stoul(v.substr(0, colon));
  const long ms = colon == std::string::npos ? 8000 : std::stol(v.substr(colon + 1));
  if (plan.seqs.size() != batch) return;
  cold_stalled_ = true;
  spdlog::warn("fault point rank.cold_shape: the first decode step of batch {} stalls {} ms on this rank", batch, ms);
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

void RankWorker::execute(const StepPlan& plan) {
  stall_on_cold_shape(plan);
  executor_->execute(plan, logits_);
  if (tp_.comm) tp_.comm->settle();
}

}  // namespace inferd::engine
