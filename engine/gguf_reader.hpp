// Reader for GGUF model files (versions 2 and 3, little-endian). The file is
// mapped read-only and validated completely on open: every later accessor works
// on data already known to be in bounds, and tensor data points into the mapping.
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "engine/mapped_bytes.hpp"
#include "kernels/dtype.hpp"

namespace inferd::engine {

// A load failure: names the file and the byte offset where reading failed.
// what() = "<file>: offset <n>: <message>".
struct LoadError : std::runtime_error {
  std::string file;
  uint64_t offset;
  std::string message;  // what() without the file and offset
  LoadError(std::string file, uint64_t offset, const std::string& what);
};

// Metadata value types, numbered as in the file.
enum class GgufType : uint32_t { U8 = 0, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 };

std::string_view to_string(GgufType t);

struct GgufTensorInfo {
  std::string name;
  kernels::DType type;
  std::vector<int64_t> dims;  // GGUF order: dims[0] is the innermost (row length)
  uint64_t offset;            // absolute file offset of the data
  size_t nbytes;
  const void* data;           // into the mapping
  uint64_t info_offset;       // where this tensor's record starts in the tensor table

  int64_t cols() const { return dims.empty() ? 0 : dims[0]; }
  int64_t rows() const;       // product of dims[1..]
  int64_t elements() const { return cols() * rows(); }
};

class GgufFile {
 public:
  // Maps and validates the file; throws LoadError.
  static std::unique_ptr<GgufFile> open(const std::string& path);
  // Validates a (page-aligned) copy of an in-memory image; `name` stands in for
  // the path in errors.
  static std::unique_ptr<GgufFile> open_memory(std::span<const uint8_t> bytes,
                                               std::string name = "<memory>");
  // A model described by a metadata-only GGUF image whose tensors live elsewhere
  // (another format's mapped files, see engine/hf_checkpoint.hpp): `tensors`
  // point into memory that `keep` holds alive as long as the file. Tensor names
  // must be unique; `name` stands in for the path in errors.
  static std::unique_ptr<GgufFile> assemble(std::span<const uint8_t> metadata, std::string name,
                                            std::vector<GgufTensorInfo> tensors,
                                            std::vector<std::shared_ptr<const void>> keep);

  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  size_t file_size() const { return size_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // start of the tensor data section

  // Metadata. Scalar getters return nullopt for an absent key and throw LoadError
  // (at the value's offset) when the key holds an incompatible type.
  bool has(std::string_view key) const;
  GgufType type_of(std::string_view key) const;  // throws LoadError if absent
  std::optional<int64_t> get_int(std::string_view key) const;   // any integer type, bool
  std::optional<double> get_float(std::string_view key) const;  // F32/F64, integers
  std::optional<std::string> get_string(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  // Arrays: empty if absent; throw LoadError when the key is not an array of a
  // compatible element type (same conversions as the scalar getters).
  std::vector<std::string> get_string_array(std::string_view key) const;
  std::vector<int64_t> get_int_array(std::string_view key) const;
  std::vector<float> get_float_array(std::string_view key) const;
  std::optional<GgufType> array_type(std::string_view key) const;  // element type; nullopt if not an array
  std::vector<std::string> keys() const;  // in file order

  // Tensors, in file order.
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;  // nullptr if absent
  // Throws LoadError naming the tensor if it is absent or its dims differ.
  const GgufTensorInfo& tensor(std::string_view name,
                               std::initializer_list<int64_t> expected_dims = {}) const;
  // Reads t's data into memory now (readahead, then one touch per page), so a
  // model used straight from the mapping pays for the disk at load, not at its
  // first request.
  void fault_in(const GgufTensorInfo& t) const;

 private:
  struct Value {
    GgufType type;
    uint64_t offset;  // of the value (after the key and type fields)
  };

  struct ArrayRef {
    GgufType elem;
    uint64_t size;
    uint64_t data;  // offset of the first element
  };

  GgufFile() = default;
  void parse();
  const Value* find_value(std::string_view key) const;
  // nullopt if absent; throws unless the key is an array whose elements `accepts`.
  std::optional<ArrayRef> array_of(std::string_view key, bool (*accepts)(GgufType), const char* kind) const;
  [[noreturn]] void fail(uint64_t offset, const std::string& message) const;

  std::string path_;
  void take(const MappedBytes& m);
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  void* mapping_ = nullptr;  // page-aligned, read-only; unmapped on destruction

  uint32_t version_ = 0;
  uint32_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  uint64_t table_offset_ = 0;  // start of the tensor table
  std::vector<std::string> key_order_;
  std::map<std::string, Value, std::less<>> values_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
  std::vector<std::shared_ptr<const void>> keep_;  // where assembled tensors live
};

}  // namespace inferd::engine
