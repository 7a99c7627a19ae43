#include "kernels/dtype.hpp"

#include <stdexcept>
#include <string>

namespace inferd::kernels {
namespace {

// Block layouts (ggml's): Q4_0 {f16 d; 16 bytes}, Q4_1 {f16 d, m; 16 bytes},
// Q8_0 {f16 d; 32 int8}, Q8_1 {f16 d, s; 32 int8}, Q5_0 {f16 d; 4 qh; 16},
// Q5_1 {f16 d, m; 4 qh; 16}: all of 32 elements. The k-quants hold 256:
// Q4_K {f16 d, dmin; 12 scales; 128}, Q5_K {.. 12 scales; 32 qh; 128},
// Q6_K {128 ql; 64 qh; 16 int8 scales; f16 d}.
constexpr DTypeTraits kF32{"f32", 1, 4};
constexpr DTypeTraits kF16{"f16", 1, 2};
constexpr DTypeTraits kBF16{"bf16", 1, 2};
constexpr DTypeTraits kQ4_0{"q4_0", 32, 18};
constexpr DTypeTraits kQ4_1{"q4_1", 32, 20};
constexpr DTypeTraits kQ8_0{"q8_0", 32, 34};
constexpr DTypeTraits kQ8_1{"q8_1", 32, 36};
constexpr DTypeTraits kQ5_0{"q5_0", 32, 22};
constexpr DTypeTraits kQ5_1{"q5_1", 32, 24};
constexpr DTypeTraits kQ4_K{"q4_k", 256, 144};
constexpr DTypeTraits kQ5_K{"q5_k", 256, 176};
constexpr DTypeTraits kQ6_K{"q6_k", 256, 210};

}  // namespace

std::optional<DType> dtype_from_id(uint32_t id) {
  switch (id) {
    case 0: return DType::F32;
    case 1: return DType::F16;
    case 2: return DType::Q4_0;
    case 3: return DType::Q4_1;
    case 6: return DType::Q5_0;
    case 7: return DType::Q5_1;
    case 8: return DType::Q8_0;
    case 9: return DType::Q8_1;
    case 12: return DType::Q4_K;
    case 13: return DType::Q5_K;
    case 14: return DType::Q6_K;
    case 30: return DType::BF16;
    default: return std::nullopt;
  }
}

const DTypeTraits& traits(DType t) {
  switch (t) {
    case DType::F32: return kF32;
    case DType::F16: return kF16;
    case DType::BF16: return kBF16;
    case DType::Q4_0: return kQ4_0;
    case DType::Q4_1: return kQ4_1;
    case DType::Q8_0: return kQ8_0;
    case DType::Q8_1: return kQ8_1;
    case DType::Q5_0: return kQ5_0;
    case DType::Q5_1: return kQ5_1;
    case DType::Q4_K: return kQ4_K;
    case DType::Q5_K: return kQ5_K;
    case DType::Q6_K: return kQ6_K;
  }
  throw std::invalid_argument("unknown dtype " + std::to_string(static_cast<uint32_t>(t)));
}

size_t row_bytes(DType t, int64_t n) {
  const DTypeTraits& tr = traits(t);
  if (n < 0 || n % tr.block_elems != 0)
    throw std::invalid_argument(std::string("row of ") + std::to_string(n) + " elements is not a whole number of " +
                                std::string(tr.name) + " blocks");
  return static_cast<size_t>(n / tr.block_elems) * tr.block_bytes;
}

bool is_block_quantized(DType t) {
  switch (t) {
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q8_0:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K: return true;
    default: return false;
  }
}

}  // namespace inferd::kernels
