// A worker rank of a tensor-parallel group: its share of the model and of the
// KV cache, running the head's step plans in the order they come. Requests,
// scheduling, the KV bookkeeping and sampling stay with the head's Engine
// (engine.hpp); a plan carries everything a rank needs (tokens, positions, block
// tables), so a worker holds no request state and a plan is all it is sent.
#pragma once
#include <atomic>
#include <memory>
#include <vector>

#include "engine/engine.hpp"
#include "engine/shape_space.hpp"

namespace inferd::engine {

class RankWorker {
 public:
  // Loads this rank's share (opts.tp) and a KV cache with the head's block
  // count; throws LoadError / std::invalid_argument as the Engine does.
  explicit RankWorker(const EngineOptions& opts);
  ~RankWorker();

  const ModelConfig& model_config() const { return model_->config(); }
  int max_model_len() const { return max_model_len_; }
  const KvGeometry& kv_geometry() const;
  kernels::Backend& backend() { return *backend_; }

  // Runs one plan's forward pass (its collectives meet the head's and the other
  // workers'); throws kernels::Cancelled once `cancel` is set, comm::CollectiveError
  // when the group breaks.
  void execute(const StepPlan& plan);
  void set_cancel_flag(const std::atomic<bool>* cancel) { backend_->set_cancel_flag(cancel); }
  // The shape keys this rank's steps can reach (what its warm-up must touch).
  std::vector<kernels::ShapeKey> reachable_shape_keys() const;

 private:
  void stall_on_cold_shape(const StepPlan& plan);

  bool cold_stalled_ = false;
  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<GgufFile> file_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<KvCache> kv_;
  std::unique_ptr<Executor> executor_;
  int max_model_len_ = 0;
  TensorParallel tp_;
  ShapeAxes axes_;
  std::vector<float> logits_;  // the gathered logits, which only the head samples from
};

}  // namespace inferd::engine
