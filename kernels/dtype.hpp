// Element and block types of weights and activations. Values follow GGUF's
// ggml_type numbering so a tensor's type id maps over unchanged.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace inferd::kernels {

enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  BF16 = 30,
};

struct DTypeTraits {
  std::string_view name;
  int64_t block_elems;  // elements per block (1 for plain floats)
  size_t block_bytes;   // bytes per block
};

// nullopt for a type id inferd does not know (the caller reports file/offset).
std::optional<DType> dtype_from_id(uint32_t id);
const DTypeTraits& traits(DType t);
// Bytes of a row of n elements; n must be a multiple of the block size.
size_t row_bytes(DType t, int64_t n);
// The block types the quantized matmul (int8 activations) takes.
bool is_block_quantized(DType t);

}  // namespace inferd::kernels
