// Sizing the KV cache by device memory (--gpu-memory-utilization): once the
// weights are on the device, the cache gets what is left of `fraction` of the
// device's memory after what is in use and a bound on the step's own buffers.
// Plain arithmetic, so it is tested without a GPU.
#pragma once
#include <cstddef>
#include <cstdint>

namespace inferd::engine {

struct ModelConfig;

// An upper bound, in bytes, on the buffers a step of at most
// `max_num_batched_tokens` tokens and `max_logits_rows` rows of logits
// allocates on a device besides the KV cache: the activations (engine/models),
// the matmul's quantized input and the attention's split scratch (the CUDA
// backend), and a fixed kScratchMargin for the step inputs, CUDA graphs and the
// allocator's rounding.
size_t step_scratch_bound(const ModelConfig& mc, int64_t max_num_batched_tokens, int64_t max_logits_rows);
inline constexpr size_t kScratchMargin = size_t(256) << 20;

struct GpuKvBudget {
  size_t total = 0;               // the device's memory
  size_t free_after_weights = 0;  // free once the weights are uploaded (cudaMemGetInfo)
  double fraction = 0.9;          // --gpu-memory-utilization
  size_t bytes_per_block = 0;     // one KV block, every layer, K and V
  size_t scratch = 0;             // step_scratch_bound()
  int min_blocks = 1;             // one sequence of max_model_len
  int max_model_len = 0;          // for the message
  size_t weights = 0;             // the weights' bytes, for the message
};

struct GpuKvPlan {
  int blocks = 0;
  size_t kv_bytes = 0;  // blocks * bytes_per_block
  size_t limit = 0;     // fraction * total
  size_t in_use = 0;    // total - free_after_weights: weights, the context, any other process
};

// The blocks the budget allows. Throws std::invalid_argument, naming the sizes
// and --gpu-memory-utilization, when what is in use after the weights (with the
// scratch) is already past the limit, or when the cache would hold less than
// one sequence of max_model_len.
GpuKvPlan plan_gpu_kv_blocks(const GpuKvBudget& b);

}  // namespace inferd::engine
