// What a model's forward pass needs in the backend's memory besides weights and
// activations: a step's token ids, positions, attention tokens (pointing into the
// backend's copy of the block tables) and logits rows. On a host-visible backend
// they are the batch's own vectors; otherwise one upload per step carries them.
// Also the growable activation buffers, allocated through the backend.
#pragma once
#include <cstddef>
#include <vector>

#include "engine/models/model.hpp"
#include "kernels/backend.hpp"

namespace inferd::engine {

struct StepInputs {
  const int32_t* tokens = nullptr;
  const int32_t* positions = nullptr;
  const kernels::AttnToken* attn = nullptr;
  const int32_t* logits_rows = nullptr;
  const kernels::RowSampling* sampling = nullptr;  // with StepBatch::sampling
};

class StepStaging {
 public:
  // Valid until the next call.
  StepInputs stage(kernels::Backend& be, const StepBatch& b);

 private:
  std::vector<kernels::AttnToken> attn_;
  std::vector<std::byte> packed_;  // the upload: ids, positions, rows, tables, attention tokens
  kernels::Buffer device_;
};

// Floats in the backend's memory that grow (never shrink) with the step.
class ActivationBuffer {
 public:
  float* reserve(kernels::Backend& be, size_t n) {
    if (n > capacity_) {
      buffer_ = be.alloc(n * sizeof(float));
      capacity_ = n;
    }
    return buffer_.as<float>();
  }

 private:
  kernels::Buffer buffer_;
  size_t capacity_ = 0;
};

}  // namespace inferd::engine
