// The Llama architecture (SmolLM2, Llama 2/3, Mistral): the shared decoder as it
// is, with Q and K stored permuted for RoPE on adjacent pairs.
#include "engine/models/decoder.hpp"

namespace inferd::engine {

std::unique_ptr<Model> make_llama(const GgufFile& file, kernels::Backend& backend, Precision precision,
                                  WeightLoader& weights, const TensorParallel& tp) {
  return make_decoder(file, backend, precision, weights, tp, {});
}

}  // namespace inferd::engine
