// The walk over one kv head's K or V rows through a block table, shared by the
// SIMD kernel files (kernels_avx2.cpp, kernels_avx512.cpp). Each includes it and
// compiles its own copy with its own instruction set: everything here has
// internal linkage (an unnamed namespace, on purpose in a header), so no copy
// built with AVX-512 can be merged into the AVX2 table. No standard-library
// templates, for the same reason.
#pragma once
#include <cstdint>

#include "kernels/cpu/kernel_table.hpp"

namespace inferd::kernels::cpu {
namespace {

constexpr int kKvChunk = 32;          // positions per step; their K or V rows stay in L1
constexpr int kMaxFastHeadDim = 256;  // larger heads (or head_dim % 8 != 0) take the scalar path

inline bool kv_fast_path(const KvLayerView& kv) { return kv.head_dim % 8 == 0 && kv.head_dim <= kMaxFastHeadDim; }

// Walks positions [p0, p1) in chunks of kKvChunk and calls fn(j0, n, rows) with
// the chunk's first offset j0 = c0 - p0, its length n and its rows of `base` (K
// or V) for kv head `kv_head`: as stored (T: float or uint16_t f16), or, when the
// cache is f16 and nq > convert_above, converted once into a float buffer by
// to_float(src, dst, head_dim) because several passes will read each row.
// The block index and offset advance with the position: no division per row
// (which alone took AVX2 attn_scores from 7.8 to 6.9 ns per position, decode).
template <class T, class ToFloat, class Fn>
inline void for_each_kv_chunk(const KvLayerView& kv, const void* base, const int32_t* block_table, int32_t p0,
                              int32_t p1, int kv_head, int nq, int convert_above, ToFloat to_float, Fn& fn) {
  const int hd = kv.head_dim, bs = kv.block_size;
  const int64_t row_stride = int64_t(kv.n_kv_heads) * hd;  // elements between consecutive slots
  const bool convert = sizeof(T) != sizeof(float) && nq > convert_above;
  alignas(64) float buf[kKvChunk * kMaxFastHeadDim];
  const T* rows[kKvChunk];
  const float* frows[kKvChunk];
  const T* head = static_cast<const T*>(base) + int64_t(kv_head) * hd;
  int32_t blk = p0 / bs, off = p0 % bs;
  for (int32_t c0 = p0; c0 < p1; c0 += kKvChunk) {
    const int n = p1 - c0 < kKvChunk ? p1 - c0 : kKvChunk;
    for (int j = 0; j < n; ++j) {
      rows[j] = head + (int64_t(block_table[blk]) * bs + off) * row_stride;
      if (++off == bs) off = 0, ++blk;
    }
    if constexpr (sizeof(T) != sizeof(float)) {
      if (convert) {
        for (int j = 0; j < n; ++j) {
          to_float(rows[j], buf + j * hd, hd);
          frows[j] = buf + j * hd;
        }
        fn(c0 - p0, n, frows);
        continue;
      }
    }
    fn(c0 - p0, n, rows);
  }
}

// The cache's element type chosen at run time: fn's generic chunk callback is
// instantiated for both f16 and float rows.
template <class ToFloat, class Fn>
inline void walk_kv(const KvLayerView& kv, const void* base, const int32_t* block_table, int32_t p0, int32_t p1,
                    int kv_head, int nq, int convert_above, ToFloat to_float, Fn&& fn) {
  if (kv.type == DType::F16)
    for_each_kv_chunk<uint16_t>(kv, base, block_table, p0, p1, kv_head, nq, convert_above, to_float, fn);
  else
    for_each_kv_chunk<float>(kv, base, block_table, p0, p1, kv_head, nq, convert_above, to_float, fn);
}

}  // namespace
}  // namespace inferd::kernels::cpu
