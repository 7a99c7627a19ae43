// Read-only, page-aligned bytes for the model readers (GGUF, safetensors): a file
// mapped whole, or a private copy of bytes already in memory, so tensor data has
// a mapped file's alignment either way.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace inferd::engine {

struct MappedBytes {
  void* mapping = nullptr;  // nullptr for an empty file
  const uint8_t* base = nullptr;
  size_t size = 0;
};

// Each throws std::runtime_error with a short reason ("cannot open: ...", "not a
// regular file", ...); the caller names the file and offset 0.
MappedBytes map_file_readonly(const std::string& path);
MappedBytes map_copy_readonly(std::span<const uint8_t> bytes);
void unmap(const MappedBytes& m);

}  // namespace inferd::engine
