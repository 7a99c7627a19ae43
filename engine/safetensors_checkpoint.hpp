// The weights of a Hugging Face checkpoint directory: model.safetensors, or the
// shards model.safetensors.index.json's weight_map names. Every shard is mapped
// and its header validated (engine/safetensors_reader.hpp); then the shards are
// checked against the index: each named shard present and readable, each
// tensor of the weight_map in the shard it names, no tensor a shard holds
// that the index does not list for it, no tensor in two shards. Tensor data
// stays in the mappings (no copy). Errors are LoadErrors naming the file (the
// shard, or the index and its key) and the tensor.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/safetensors_reader.hpp"

namespace inferd::engine {

inline constexpr const char* kSafetensorsIndex = "model.safetensors.index.json";

class SafetensorsCheckpoint {
 public:
  // Opens and cross-checks every weight file of `dir`; throws LoadError.
  static SafetensorsCheckpoint open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  bool sharded() const { return sharded_; }
  // The weight files (names within dir), sorted, each mapped.
  const std::vector<std::shared_ptr<SafetensorsFile>>& files() const { return files_; }
  const std::vector<std::string>& file_names() const { return names_; }
  size_t tensor_count() const { return where_.size(); }

  struct Located {
    const SafetensorsTensor* tensor = nullptr;  // nullptr: in no file
    const std::string* file = nullptr;          // its file's name within dir
  };
  Located find(std::string_view name) const;

 private:
  std::string dir_;
  bool sharded_ = false;
  std::vector<std::string> names_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t, std::less<>> where_;  // tensor -> index into files_
};

// The weight files of `dir` (names within it) without opening them: the shards
// the index names, else model.safetensors. `assigned` gets the index's
// tensor -> shard map (empty when unsharded). Throws LoadError.
std::vector<std::string> checkpoint_shard_names(const std::string& dir, std::map<std::string, std::string>* assigned = nullptr);

}  // namespace inferd::engine
