// The pre-norm decoder that the Llama family and its close relatives share:
// grouped-query attention with RoPE, RMSNorm and a SwiGLU feed-forward. An
// architecture is this decoder plus the few options below, read from its own
// GGUF keys and tensors (engine/models/llama.cpp, qwen2.cpp, qwen3.cpp, gemma2.cpp,
// gemma3.cpp).
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

  // The Gemma additions. The token embeddings scaled by sqrt(embedding_length)
  // (the hidden state's float, as transformers does) before the first block.
  bool embed_scale = false;
  // blk.N.post_attention_norm.weight and post_ffw_norm.weight: an RMSNorm of the
  // attention's and the feed-forward's output before each residual add.
  bool post_norms = false;
  // The feed-forward's gate through GELU (tanh approximation) rather than SiLU.
  bool gelu = false;
  // ARCH.attn_logit_softcapping and ARCH.final_logit_softcapping: the attention
  // scores and the final logits soft-capped, cap * tanh(x / cap), the caps
  // defaulting to these when the keys are absent (0: none).
  float attn_softcap = 0, final_softcap = 0;
  // Nonzero: ARCH.attention.sliding_window (then required) applies to the local
  // layers only, layer l being local when l % swa_pattern < swa_pattern - 1
  // (Gemma 2: 2, the even layers). 0: a window, where set, applies to every
  // layer, and the context is capped at it.
  int swa_pattern = 0;
  // Nonzero: the local layers' RoPE base, their rotation unscaled (Gemma 3:
  // 10000, as llama.cpp; the global layers take ARCH.rope.freq_base and scaling).
  float local_rope_base = 0;
  // The attention scale is 1 / sqrt(head_dim), except in a model of this many
  // layers, where it is 1 / sqrt(embedding_length / head_count): llama.cpp's
  // rule for Gemma's 27B models (transformers' query_pre_attn_scalar, which
  // the file does not carry). 0: always the former.
  int width_scale_layers = 0;
};

std::unique_ptr<Model> make_decoder(const GgufFile& file, kernels::Backend& backend, Precision precision,
                                    WeightLoader& weights, const TensorParallel& tp, const DecoderOptions& options);

}  // namespace inferd::engine
