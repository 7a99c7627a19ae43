// The structural gate a checkpoint directory passes before a load: its weight
// files mapped and cross-checked (engine/safetensors_checkpoint.hpp), then
// every parameter its architecture needs found with the exact name, dtype and
// shape, and nothing else. Today the gate knows deepseek_v4
// (engine/models/deepseek_v4_schema.hpp).
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace inferd::engine {

struct GateResult {
  std::vector<std::string> lines;     // what was checked, e.g. "1565/1565 params"
  std::vector<std::string> problems;  // each names the file (shard, index or config) and the tensor or key
  bool passed() const { return problems.empty(); }
};

// config.json's model_type when `path` is a directory holding one that parses; "" otherwise.
std::string checkpoint_model_type(const std::string& path);

// Whether the gate has a schema for `model_type`.
bool gate_knows(const std::string& model_type);

// Runs the gate on the checkpoint in `dir` (its model_type must be one the
// gate knows); `on_line` hears each line as it is reached.
GateResult check_checkpoint(const std::string& dir, const std::function<void(const std::string&)>& on_line = {});

}  // namespace inferd::engine
