#include "engine/rank_worker.hpp"

#include <spdlog/spdlog.h>

#include "engine/executor.hpp"
#include "engine/gguf_reader.hpp"

namespace inferd::engine {

RankWorker::RankWorker(const EngineOptions& opts) {
  backend_ = opts.backend ? opts.backend() : kernels::make_cpu_backend(opts.threads);
  file_ = GgufFile::open(opts.model_path);
  model_ = load_model(*file_, *backend_, Precision::Fast, opts.on_load_progress, opts.tp);
  const auto& mc = model_->config();
  max_model_len_ = resolve_max_model_len(mc, opts.max_model_len);
  kv_ = std::make_unique<KvCache>(plan_kv_cache(mc, max_model_len_, opts), *backend_);
  executor_ = std::make_unique<Executor>(*model_, *kv_);
  const auto& g = kv_->geometry();
  spdlog::info("worker rank {} of {}: {} ({} of {} kv heads), kv cache {} blocks x {} tokens ({:.0f} MiB), {} threads",
               opts.tp.rank, opts.tp.size, mc.name, mc.kv_heads_here, mc.n_kv_heads, g.num_blocks, g.block_size,
               g.total_bytes() / 1048576.0, backend_->threads());
}

RankWorker::~RankWorker() = default;

const KvGeometry& RankWorker::kv_geometry() const { return kv_->geometry(); }

void RankWorker::execute(const StepPlan& plan) { executor_->execute(plan, logits_); }

}  // namespace inferd::engine
