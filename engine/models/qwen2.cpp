// The Qwen2 architecture (Qwen2, Qwen2.5): the shared decoder with biases on the
// query, key and value projections and RoPE on the halves of each head.
#include "engine/models/decoder.hpp"

namespace inferd::engine {

std::unique_ptr<Model> make_qwen2(const GgufFile& file, kernels::Backend& backend, Precision precision,
                                  WeightLoader& weights, const TensorParallel& tp) {
  return make_decoder(file, backend, precision, weights, tp, {.qkv_bias = true, .rope_neox = true});
}

}  // namespace inferd::engine
