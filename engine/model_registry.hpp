// Architecture registry: maps GGUF `general.architecture` to the file that
// implements it. Adding an architecture = one file + one registration line.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/model.hpp"

namespace inferd::engine {

using ModelFactory = std::function<std::unique_ptr<Model>(const GgufFile&, kernels::Backend&, Precision)>;

// Loads the model the file describes; throws LoadError naming the file when the
// architecture is unknown or a tensor is missing or misshapen.
std::unique_ptr<Model> load_model(const GgufFile& file, kernels::Backend& backend,
                                  Precision precision = Precision::Fast);
std::vector<std::string> known_architectures();

// Defined in each architecture's file.
std::unique_ptr<Model> make_llama(const GgufFile& file, kernels::Backend& backend, Precision precision);

}  // namespace inferd::engine
