// DeepSeek-V4's forward pass (model_type deepseek_v4: V4-Flash, and the target
// model of its DSpark release) over a checkpoint directory of safetensors
// shards, as engine/models/deepseek_v4_schema.hpp describes them.
//
// What runs today: the prefill of one prompt, every position's logits, on a
// backend whose memory the host reads (the CPU backend): the hyper-connection
// streams (deepseek_v4_hc.hpp), the single-latent attention with sinks over the
// sliding window plus the compressed entries of ratio-4 layers (picked by the
// lightning indexer) and of the heavily compressed layers
// (deepseek_v4_attention.hpp), the per-layer RoPE (YaRN on compressed layers),
// the mixture of experts with hash or score routing (Backend::moe_route /
// moe_experts) and the shared expert, and the hyper-connection head. FP8 and
// MXFP4 weights are read in place through Backend::matmul_scaled; activations
// stay float32 (no FP8/FP4 activation, KV or indexer quantization is
// simulated, so there is no Hadamard rotation either: without that rounding
// it cancels in the indexer's products).
//
// Not yet: decoding with KV state (rings, compressor pooling states), several
// sequences, the DSpark / NextN draft stages, a device backend.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/models/deepseek_v4_schema.hpp"
#include "kernels/backend.hpp"

namespace inferd::engine {

struct DeepseekV4Config : DeepseekV4Dims {
  int64_t rope_dim = 0, index_topk = 0, window = 0;
  std::vector<int64_t> ratios;  // compress_ratios of the layers: 0 window only, 4 with the indexer, else heavy
  float routed_scale = 1, swiglu_limit = 0, hc_eps = 1e-6f, norm_eps = 1e-6f;
  int sinkhorn_iters = 20;
  double rope_theta = 10000, compress_rope_theta = 160000;
  // rope_scaling (type yarn) of the compressed layers; factor 0: none.
  double yarn_factor = 0, yarn_original_context = 0, yarn_beta_fast = 32, yarn_beta_slow = 1;
};

class DeepseekV4 {
 public:
  // Holds `dir` against the checkpoint gate (engine/checkpoint_gate.hpp), then
  // maps its weights. Throws LoadError naming the file and the key or tensor,
  // and std::invalid_argument when the backend cannot run it.
  static std::unique_ptr<DeepseekV4> load(const std::string& dir, kernels::Backend& backend);
  ~DeepseekV4();

  const DeepseekV4Config& config() const;
  // The logits of every position of `tokens` (one sequence from position 0),
  // [tokens.size()][vocab]. `layer_streams`, when given, gets each layer's output
  // hyper-connection streams [tokens.size()][hc][hidden]. Throws
  // std::invalid_argument for a token outside the vocabulary.
  std::vector<float> prefill(std::span<const int32_t> tokens,
                             std::vector<std::vector<float>>* layer_streams = nullptr) const;

 private:
  struct Impl;
  explicit DeepseekV4(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace inferd::engine
