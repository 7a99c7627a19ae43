// Aligned host memory for the backends whose memory is the host's (the CPU
// backend and the shape tracer): 64-byte aligned, so SIMD loads and each KV head's
// slot sit on whole cache lines.
#pragma once
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>

namespace inferd::kernels {

inline void* host_alloc(size_t bytes, bool zeroed) {
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (!p) throw std::bad_alloc();
  if (zeroed) std::memset(p, 0, rounded);
  return p;
}

inline void host_free(void* p) { std::free(p); }

}  // namespace inferd::kernels
