// The Qwen3 architecture (dense Qwen3 models): the shared decoder with an
// RMSNorm of each query and key head before RoPE, no projection biases, RoPE on
// the halves of each head, and a head width (attention.key_length) that need
// not be embedding_length / head_count.
#include "engine/models/decoder.hpp"

namespace inferd::engine {

std::unique_ptr<Model> make_qwen3(const GgufFile& file, kernels::Backend& backend, Precision precision,
                                  WeightLoader& weights, const TensorParallel& tp) {
  return make_decoder(file, backend, precision, weights, tp, {.qk_norm = true, .rope_neox = true});
}

}  // namespace inferd::engine
