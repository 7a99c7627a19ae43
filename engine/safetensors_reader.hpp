// Reader for safetensors files: an 8-byte little-endian header length, a JSON
// header naming each tensor's dtype, shape and [begin, end) byte range, then the
// data. The file is mapped read-only and the header validated completely on
// open (lengths, dtypes' sizes, ranges inside the file, no two ranges sharing
// bytes, no tensor named twice); tensor data points into the mapping.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/gguf_reader.hpp"  // LoadError
#include "engine/mapped_bytes.hpp"

namespace inferd::engine {

struct SafetensorsTensor {
  std::string name;
  std::string dtype;           // as written: "BF16", "F16", "F32", "I64", "F8_E4M3", "F8_E8M0", ...
  std::vector<int64_t> shape;  // outermost first (row-major)
  uint64_t offset;             // absolute file offset of the data
  size_t nbytes;
  const void* data;            // into the mapping

  int64_t elements() const;
};

class SafetensorsFile {
 public:
  // Maps and validates the file; throws LoadError naming it and the byte offset.
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);
  // Validates a (page-aligned) copy of an in-memory image; `name` stands in for the path.
  static std::shared_ptr<SafetensorsFile> open_memory(std::span<const uint8_t> bytes, std::string name = "<memory>");

  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  size_t file_size() const { return size_; }
  uint64_t data_offset() const { return data_offset_; }  // 8 + header length

  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }  // in header order
  const SafetensorsTensor* find(std::string_view name) const;                 // nullptr if absent

 private:
  SafetensorsFile() = default;
  void parse();
  [[noreturn]] void fail(uint64_t offset, const std::string& message) const;

  std::string path_;
  void take(const MappedBytes& m);
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  void* mapping_ = nullptr;
  uint64_t data_offset_ = 0;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
};

// Bytes per element of a safetensors dtype; 0 for a name it does not define.
size_t safetensors_dtype_size(std::string_view dtype);

}  // namespace inferd::engine
