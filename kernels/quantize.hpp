// Row conversions between float and every DType: dequantization (embedding
// lookups, references) and quantization (building test and converted weights).
#pragma once
#include <cstdint>

#include "kernels/dtype.hpp"

namespace inferd::kernels {

// dst[0..n) = the values of the row at src; n is a multiple of the block size.
void dequantize_row(DType t, const void* src, float* dst, int64_t n);
// Writes row_bytes(t, n) bytes at dst encoding src[0..n) (round to nearest).
void quantize_row(DType t, const float* src, void* dst, int64_t n);

}  // namespace inferd::kernels
