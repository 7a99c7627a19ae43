// The Gemma 2 architecture: the shared decoder with the token embeddings scaled
// by sqrt(embedding_length), an RMSNorm after the attention and after the
// feed-forward as well as before them, a GELU-gated feed-forward, soft-capped
// attention scores and final logits (caps 50 and 30 unless the file says
// otherwise), a sliding window on the even layers (the odd ones attend to the
// whole context), RoPE on the halves of each head and a head width of its own.
// The RMSNorm weights are used as stored: llama.cpp's converter writes
// transformers' (1 + w). The attention scale follows llama.cpp: the 27B model
// (46 layers) by embedding_length / head_count, the others by the head width.
#include "engine/models/decoder.hpp"

namespace inferd::engine {

std::unique_ptr<Model> make_gemma2(const GgufFile& file, kernels::Backend& backend, Precision precision,
                                   WeightLoader& weights, const TensorParallel& tp) {
  return make_decoder(file, backend, precision, weights, tp,
                      {.rope_neox = true,
                       .embed_scale = true,
                       .post_norms = true,
                       .gelu = true,
                       .attn_softcap = 50.0f,
                       .final_softcap = 30.0f,
                       .swa_pattern = 2,
                       .width_scale_layers = 46});
}

}  // namespace inferd::engine
