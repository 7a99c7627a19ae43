// The procfs the monitors read. The root is configurable so tests can replay
// recorded files from a temporary directory.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace inferd::health {

class Procfs {
 public:
  explicit Procfs(std::filesystem::path root = "/proc");

  const std::filesystem::path& root() const { return root_; }
  std::filesystem::path path(std::string_view relative) const { return root_ / relative; }
  // The whole file, or nullopt when it cannot be read.
  std::optional<std::string> read(std::string_view relative) const;
  // Entries of a directory (e.g. "self/fd"), or nullopt when it cannot be listed.
  std::optional<std::size_t> count_entries(std::string_view relative) const;

 private:
  std::filesystem::path root_;
};

// The number after "key:" in "Key:  123 kB" lines (meminfo, status); a kB unit is
// turned into bytes. Nullopt when the key is missing or its value is malformed.
std::optional<uint64_t> colon_field(std::string_view text, std::string_view key);

}  // namespace inferd::health
