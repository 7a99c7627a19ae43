// DeepSeek-V4's forward pass (model_type deepseek_v4: V4-Flash, and the target
// model of its DSpark release) over a checkpoint directory of safetensors
// shards, as engine/models/deepseek_v4_schema.hpp describes them.
//
// What runs today, on a backend whose memory the host reads (the CPU backend):
// sequences from states the caller holds (DeepseekV4State), each fed any
// number of tokens a call (a whole prompt, a prompt in chunks, or one token a
// step when decoding), several sequences in one call, each position's logits
// those of one prefill of its whole sequence (every row goes through the same
// code; only a kernel whose summation order depends on the rows it is given
// can tell them apart, by rounding). The forward pass: the hyper-connection
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
// Not yet: the DSpark / NextN draft stages, a device backend.
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

// What one sequence's next positions need from the ones before: per layer the
// attention window's keys and each compressor's unpooled inputs and pooled
// entries. Starts empty (position 0); DeepseekV4::forward sizes and advances
// it. Its size grows by one compressed entry per 4 or 128 positions on the
// compressed layers; the rest is bounded by the window and the ratio.
// Pooled entries kept in paged blocks (the engine's KV cache) instead of the
// state's own memory: entry j (pooled from positions j * ratio on) is a row of
// `dim` floats in the block holding position j * ratio, at row
// (j * ratio % block_size) / ratio. The block size must be a multiple of the
// ratio, or the ratio of it.
struct DeepseekV4Pages {
  float* base = nullptr;           // block 0's rows; null: the entries are in the state's vector
  int64_t block_stride = 0;        // floats from one block to the next
  int64_t block_size = 0;          // positions a block covers
  std::span<const int32_t> table;  // the sequence's blocks, in position order
};

struct DeepseekV4State {
  struct Compressor {
    // The projected inputs [.][coff * dim] (score plus ape) of the positions
    // from CompressorInput::window_start(entries pooled) on.
    std::vector<float> kv, score;
    int64_t pooled = 0;            // entries so far
    std::vector<float> entries;    // [pooled][dim], normed and rotated at their windows' first positions
    DeepseekV4Pages pages;         // where the entries are instead, when set

    // Entry j's row; throws std::out_of_range past the paged table.
    float* entry(int64_t j, int64_t ratio, int64_t dim);
    // Appends m entries [m][dim].
    void append(const float* rows, int64_t m, int64_t ratio, int64_t dim);
  };
  struct Layer {
    std::vector<float> window;  // the keys [min(position, window - 1)][head_dim] before the next position
    Compressor compressor;      // ratio 4 and heavy layers
    Compressor index;           // the indexer's keys, ratio-4 layers
  };
  int64_t position = 0;  // the positions fed so far
  std::vector<Layer> layers;
};

// One sequence's part of a call: its state and the tokens fed at
// state->position on.
struct DeepseekV4Feed {
  DeepseekV4State* state = nullptr;
  std::span<const int32_t> tokens;
};

class DeepseekV4 {
 public:
  // Holds `dir` against the checkpoint gate (engine/checkpoint_gate.hpp), then
  // maps its weights. Throws LoadError naming the file and the key or tensor,
  // and std::invalid_argument when the backend cannot run it.
  static std::unique_ptr<DeepseekV4> load(const std::string& dir, kernels::Backend& backend);
  ~DeepseekV4();

  const DeepseekV4Config& config() const;
  // Feeds `tokens` at positions state.position on and returns their logits
  // [tokens.size()][vocab]; state advances past them. `layer_streams`, when
  // given, gets each layer's output hyper-connection streams
  // [tokens.size()][hc][hidden]. Throws std::invalid_argument for a token
  // outside the vocabulary or a state of another model's layer count, leaving
  // the state as it was.
  std::vector<float> forward(DeepseekV4State& state, std::span<const int32_t> tokens,
                             std::vector<std::vector<float>>* layer_streams = nullptr) const;
  // Several sequences in one call: their rows go through the matmuls and the
  // experts together, each attends over its own state. The logits (and
  // streams) are the feeds' rows in order; with `rows`, the logits are only
  // those rows' (indices into the feeds' tokens, in that order). Also throws for
  // a feed without a state, a state fed twice or a row past the tokens,
  // changing no state.
  std::vector<float> forward(std::span<const DeepseekV4Feed> feeds,
                             std::vector<std::vector<float>>* layer_streams = nullptr,
                             const std::vector<int32_t>* rows = nullptr) const;
  // forward from an empty state: one sequence from position 0.
  std::vector<float> prefill(std::span<const int32_t> tokens,
                             std::vector<std::vector<float>>* layer_streams = nullptr) const;

 private:
  struct Impl;
  explicit DeepseekV4(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace inferd::engine
