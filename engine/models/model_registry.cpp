#include "engine/models/model_registry.hpp"

#include <map>

#include "engine/gguf_reader.hpp"

namespace inferd::engine {
namespace {

const std::map<std::string, ModelFactory>& registry() {
  // Each is the shared decoder (engine/models/decoder.hpp) with its own options, but DeepSeek-V4.
  static const std::map<std::string, ModelFactory> r = {
      {"llama", make_llama},  // SmolLM2, Llama 2/3, Mistral
      {"qwen2", make_qwen2},  // Qwen2, Qwen2.5
      {"qwen3", make_qwen3},
      {"gemma2", make_gemma2},  // Gemma 2
      {"gemma3", make_gemma3},  // Gemma 3's text models
      {"deepseek_v4", make_deepseek_v4},  // its own forward pass, not the shared decoder
  };
  return r;
}

}  // namespace

WeightLoader::WeightLoader(const GgufFile& file, LoadProgressFn progress)
    : file_(file), progress_(std::move(progress)) {
  for (const auto& t : file_.tensors()) now_.bytes_total += t.nbytes;
  now_.tensors_total = static_cast<int>(file_.tensors().size());
  report();
}

const GgufTensorInfo& WeightLoader::take(const GgufTensorInfo& t) {
  file_.fault_in(t);
  now_.bytes_done += t.nbytes;
  ++now_.tensors_done;
  report();
  return t;
}

void WeightLoader::finish() {
  if (now_.tensors_done == now_.tensors_total) return;
  now_.bytes_done = now_.bytes_total;
  now_.tensors_done = now_.tensors_total;
  report();
}

void WeightLoader::report() {
  if (progress_) progress_(now_);
}

std::unique_ptr<Model> load_model(const GgufFile& file, kernels::Backend& backend, Precision precision,
                                  const LoadProgressFn& progress, const TensorParallel& tp) {
  auto arch = file.get_string("general.architecture");
  if (!arch) throw LoadError(file.path(), 0, "missing general.architecture");
  auto it = registry().find(*arch);
  if (it == registry().end()) {
    std::string known;
    for (const auto& name : known_architectures()) known += (known.empty() ? "" : ", ") + name;
    throw LoadError(file.path(), 0, "unsupported architecture '" + *arch + "' (known: " + known + ")");
  }
  WeightLoader weights(file, progress);
  auto model = it->second(file, backend, precision, weights, tp);
  weights.finish();
  return model;
}

std::vector<std::string> known_architectures() {
  std::vector<std::string> names;
  for (const auto& [name, _] : registry()) names.push_back(name);
  return names;
}

}  // namespace inferd::engine
