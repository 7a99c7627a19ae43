// A parsed JSON file of a checkpoint directory (config.json, the index, the
// tokenizer's files), with getters whose errors are LoadErrors naming the
// file and the key.
#pragma once
#include <boost/json.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/gguf_reader.hpp"  // LoadError

namespace inferd::engine {

struct JsonFile {
  std::string path;
  boost::json::value root;

  [[noreturn]] void fail(const std::string& key, const std::string& message) const;
  const boost::json::object& object() const;
  const boost::json::value* find(const std::string& key) const;  // nullptr when absent or null
  std::optional<int64_t> get_int(const std::string& key) const;
  int64_t need_int(const std::string& key, int64_t min = 1) const;  // in [min, INT32_MAX]
  std::optional<double> get_float(const std::string& key) const;
  std::optional<bool> get_bool(const std::string& key) const;
  std::optional<std::string> get_string(const std::string& key) const;
  // An array of integers; nullopt when absent.
  std::optional<std::vector<int64_t>> get_ints(const std::string& key) const;
};

// Reads and parses `path`; nullopt when it cannot be opened and is not
// `required`. Throws LoadError (with the byte offset of a syntax error).
std::optional<JsonFile> read_json(const std::string& path, bool required);

}  // namespace inferd::engine
