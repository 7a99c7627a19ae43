// The pre-norm decoder that the Llama family and its close relatives share:
// grouped-query attention with RoPE, RMSNorm and a SwiGLU feed-forward. An
// architecture is this decoder plus the few options below, read from its own
// GGUF keys and tensors (engine/models/llama.cpp, qwen2.cpp, qwen3.cpp).
#pragma once
#include <memory>

#include "engine/models/model_registry.hpp"

namespace inferd::engine {

struct DecoderOptions {
  // blk.N.attn_q.bias, attn_k.bias and attn_v.bias, added after the projections (Qwen2).
  bool qkv_bias = false;
  // blk.N.attn_q_norm.weight and attn_k_norm.weight (head_dim long): an RMSNorm
  // of each query and key head before RoPE (Qwen3).
  bool qk_norm = false;
  // RoPE rotates the halves of each head (Q and K stored as trained); otherwise
  // adjacent pairs, as GGUF llama files store Q and K permuted for. A Hugging
  // Face checkpoint says halves through kRopeNeoxKey whatever this is.
  bool rope_neox = false;
};

std::unique_ptr<Model> make_decoder(const GgufFile& file, kernels::Backend& backend, Precision precision,
                                    WeightLoader& weights, const TensorParallel& tp, const DecoderOptions& options);

}  // namespace inferd::engine
