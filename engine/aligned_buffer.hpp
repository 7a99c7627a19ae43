// A growable float buffer aligned to 64 bytes (SIMD loads, whole cache lines).
#pragma once
#include <cstddef>
#include <cstdlib>
#include <new>

namespace inferd::engine {

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer() { std::free(data_); }

  // Grows (never shrinks) to hold n floats; contents are not preserved.
  float* reserve(size_t n) {
    if (n > cap_) {
      std::free(data_);
      size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
      data_ = static_cast<float*>(std::aligned_alloc(64, bytes));
      if (!data_) throw std::bad_alloc();
      cap_ = n;
    }
    return data_;
  }
  float* data() const { return data_; }

 private:
  float* data_ = nullptr;
  size_t cap_ = 0;
};

}  // namespace inferd::engine
