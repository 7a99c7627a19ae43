#include "engine/model_registry.hpp"

#include <map>

#include "engine/gguf_reader.hpp"

namespace inferd::engine {
namespace {

const std::map<std::string, ModelFactory>& registry() {
  // Llama-family files (SmolLM2, Llama 2/3, Mistral) share one implementation.
  static const std::map<std::string, ModelFactory> r = {
      {"llama", make_llama},
  };
  return r;
}

}  // namespace

std::unique_ptr<Model> load_model(const GgufFile& file, kernels::Backend& backend, Precision precision) {
  auto arch = file.get_string("general.architecture");
  if (!arch) throw LoadError(file.path(), 0, "missing general.architecture");
  auto it = registry().find(*arch);
  if (it == registry().end()) throw LoadError(file.path(), 0, "unsupported architecture '" + *arch + "'");
  return it->second(file, backend, precision);
}

std::vector<std::string> known_architectures() {
  std::vector<std::string> names;
  for (const auto& [name, _] : registry()) names.push_back(name);
  return names;
}

}  // namespace inferd::engine
