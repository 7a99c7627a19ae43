// The Gemma 3 architecture (its text models, `gemma3`): Gemma 2's decoder
// (engine/models/gemma2.cpp) without soft-capping, with an RMSNorm of each query
// and key head before RoPE, five local layers to every global one (layer l is
// global when l % 6 == 5) and the local layers' RoPE at base 10000, unscaled,
// while the global ones take gemma3.rope.freq_base and its scaling. As for
// Gemma 2, the norm weights are used as stored (1 + w, as llama.cpp's converter
// writes them, the q/k norms' too), and the 27B model (62 layers) scales
// attention by embedding_length / head_count.
#include "engine/models/decoder.hpp"

namespace inferd::engine {

std::unique_ptr<Model> make_gemma3(const GgufFile& file, kernels::Backend& backend, Precision precision,
                                   WeightLoader& weights, const TensorParallel& tp) {
  return make_decoder(file, backend, precision, weights, tp,
                      {.qk_norm = true,
                       .rope_neox = true,
                       .embed_scale = true,
                       .post_norms = true,
                       .gelu = true,
                       .swa_pattern = 6,
                       .local_rope_base = 10000.0f,
                       .width_scale_layers = 62});
}

}  // namespace inferd::engine
