// Architecture registry: maps GGUF `general.architecture` to the file that
// implements it. Adding an architecture = one file + one registration line.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/models/model.hpp"
#include "engine/models/tensor_parallel.hpp"

namespace inferd::engine {

struct GgufTensorInfo;

// How far a load has got. Bytes and tensors count the file's weights, the bulk
// of any load; the stages after "weights" ("tokenizer", "draft_model" with a
// speculative draft model, then "kv_cache") carry
// the final counts. Reports never go backwards and the last has done == total.
struct LoadProgress {
  std::string_view stage;
  uint64_t bytes_done = 0, bytes_total = 0;
  int tensors_done = 0, tensors_total = 0;
};
using LoadProgressFn = std::function<void(const LoadProgress&)>;

// Takes weights in for an architecture's loader: each tensor's pages are faulted
// in (the model runs straight from the mapping, and the file should be read at
// load, not by the first request), then the tensor is reported done.
class WeightLoader {
 public:
  WeightLoader(const GgufFile& file, LoadProgressFn progress);
  // Call once per tensor the model keeps, after any conversion; returns t.
  const GgufTensorInfo& take(const GgufTensorInfo& t);
  // Ends the stage: tensors the architecture left unused count as done.
  void finish();

 private:
  void report();
  const GgufFile& file_;
  LoadProgressFn progress_;
  LoadProgress now_{.stage = "weights"};
};

using ModelFactory = std::function<std::unique_ptr<Model>(const GgufFile&, kernels::Backend&, Precision, WeightLoader&,
                                                          const TensorParallel&)>;

// Loads the model the file describes; throws LoadError naming the file when the
// architecture is unknown or a tensor is missing or misshapen. `progress`, if
// set, hears the "weights" stage, from 0 to every byte of the file's tensors.
// `tp`: the rank's share of a tensor-parallel group (the whole model by default).
std::unique_ptr<Model> load_model(const GgufFile& file, kernels::Backend& backend,
                                  Precision precision = Precision::Fast, const LoadProgressFn& progress = {},
                                  const TensorParallel& tp = {});
std::vector<std::string> known_architectures();

// Defined in each architecture's file.
std::unique_ptr<Model> make_llama(const GgufFile& file, kernels::Backend& backend, Precision precision,
                                  WeightLoader& weights, const TensorParallel& tp);
std::unique_ptr<Model> make_qwen2(const GgufFile& file, kernels::Backend& backend, Precision precision,
                                  WeightLoader& weights, const TensorParallel& tp);
std::unique_ptr<Model> make_qwen3(const GgufFile& file, kernels::Backend& backend, Precision precision,
                                  WeightLoader& weights, const TensorParallel& tp);
std::unique_ptr<Model> make_gemma2(const GgufFile& file, kernels::Backend& backend, Precision precision,
                                   WeightLoader& weights, const TensorParallel& tp);
// A Hugging Face DeepSeek-V4 checkpoint directory (engine/models/deepseek_v4_serving.cpp).
std::unique_ptr<Model> make_deepseek_v4(const GgufFile& file, kernels::Backend& backend, Precision precision,
                                        WeightLoader& weights, const TensorParallel& tp);
std::unique_ptr<Model> make_gemma3(const GgufFile& file, kernels::Backend& backend, Precision precision,
                                   WeightLoader& weights, const TensorParallel& tp);

}  // namespace inferd::engine
