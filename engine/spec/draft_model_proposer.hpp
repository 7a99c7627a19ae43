// Draft-model proposer, after vLLM's "draft_model" method: a smaller model of
// the same vocabulary guesses each sequence's next tokens greedily, one forward
// per draft position for all sequences drafting, with its own paged KV cache. It keeps what it has fed each
// sequence; the next call feeds only what changed since (the accepted drafts
// and the target's token, from the first position where the sequence differs
// from what it fed), so rejected drafts cost nothing more than being
// overwritten. Drafting runs on the engine's step thread, between the target's
// steps, on the target's backend.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/kv/kv_cache.hpp"
#include "engine/kv/kv_cache_manager.hpp"
#include "engine/models/model.hpp"
#include "engine/shape_space.hpp"
#include "engine/spec/proposer.hpp"

namespace inferd::engine {

class GgufFile;
class Tokenizer;

struct DraftModelOptions {
  std::string model_path;          // a GGUF file or checkpoint directory
  int num_speculative_tokens = 5;  // drafts per sequence at most
};

// What the target engine allows, which the draft's steps and cache follow.
struct DraftLimits {
  int max_model_len = 0;
  int max_num_batched_tokens = 0;  // the widest forward the draft runs (a prompt goes in chunks)
  int block_size = 16;
  size_t kv_cache_bytes = 0;       // the draft's cache; at least one sequence of max_model_len
  Precision precision = Precision::Fast;
};

class DraftModelProposer final : public Proposer {
 public:
  // Loads the draft on `backend`; throws std::invalid_argument (or LoadError)
  // naming the file when it cannot draft for a target with this tokenizer.
  DraftModelProposer(const DraftModelOptions& opts, kernels::Backend& backend, const Tokenizer& target,
                     const DraftLimits& limits);
  ~DraftModelProposer() override;

  void propose(std::span<const DraftRequest> reqs, std::vector<std::vector<int32_t>>& drafts) override;
  void release(uint64_t seq) override;
  void clear() override;

  // The shape keys the draft's forwards can reach under the target's axes, and
  // a run of real forwards that touches each of them (engine/shape_space.hpp).
  std::vector<kernels::ShapeKey> reachable_shape_keys(const ShapeAxes& target) const override;
  void warm(const ShapeAxes& target) override;

  // Hears each forward just before it runs, with its work in tokens x context
  // (as StepPlan::work counts it): the engine's step watchdog sees the draft's
  // forwards as steps of their own.
  void on_forward(std::function<void(uint64_t work)> hook) { on_forward_ = std::move(hook); }

  const ModelConfig& config() const { return model_->config(); }
  size_t sequences_held() const { return fed_.size(); }

 private:
  struct Fed {
    std::vector<int32_t> tokens;  // what the draft's cache holds for the sequence, in order
    uint64_t last_use = 0;
  };
  void draft(std::span<const DraftRequest> reqs, std::vector<std::vector<int32_t>>& drafts);
  bool make_room(uint64_t seq, int positions, const std::vector<uint64_t>& drafting);
  std::vector<int32_t> forward_argmax(const StepBatch& batch);
  static ShapeAxes draft_axes(const ShapeAxes& target);

  DraftModelOptions opts_;
  DraftLimits limits_;
  kernels::Backend& backend_;
  std::unique_ptr<GgufFile> file_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<KvCache> kv_;
  std::unique_ptr<KvCacheManager> blocks_;
  int n_tokens_ = 0;  // ids the target's tokenizer knows: the draft's padding ids are never proposed
  std::unordered_map<uint64_t, Fed> fed_;
  uint64_t clock_ = 0;
  StepBatch batch_;
  std::vector<float> logits_;
  std::function<void(uint64_t)> on_forward_;
};

}  // namespace inferd::engine
