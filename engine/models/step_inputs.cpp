#include "engine/models/step_inputs.hpp"

#include <algorithm>
#include <cstring>

namespace inferd::engine {
namespace {

// 1 MiB: the block tables of 256 sequences of 16384 tokens in blocks of 16.
constexpr size_t kMinDeviceBytes = size_t(1) << 20;

}  // namespace

StepInputs StepStaging::stage(kernels::Backend& be, const StepBatch& b) {
  const size_t T = b.size();
  attn_.resize(T);
  if (be.host_visible()) {
    for (size_t i = 0; i < T; ++i) attn_[i] = {b.block_tables.data() + b.table_of[i], b.positions[i]};
    return {b.tokens.data(), b.positions.data(), attn_.data(), b.logits_rows.data(), b.sampling.data()};
  }
  // One packed upload: [attention tokens][tokens][positions][logits rows][sampling][block tables].
  // What the step's kernels are handed (all but the tables) lies at offsets that depend
  // on the step's token and row counts alone, and the buffer is large from the
  // start, so a decode step of the same size finds its inputs at the same device
  // addresses however long its block tables have grown: what a captured step
  // replayed needs (Backend::run_captured).
  const size_t i32 = sizeof(int32_t);
  const size_t at_tokens = T * sizeof(kernels::AttnToken), at_pos = at_tokens + T * i32, at_rows = at_pos + T * i32;
  const size_t at_sampling = (at_rows + b.logits_rows.size() * i32 + 7) / 8 * 8;
  const size_t at_tables = at_sampling + b.sampling.size() * sizeof(kernels::RowSampling);
  const size_t bytes = at_tables + b.block_tables.size() * i32;
  if (device_.bytes() < bytes) device_ = be.alloc(std::max(bytes * 2, kMinDeviceBytes));
  auto* base = device_.as<std::byte>();
  const auto* tables = reinterpret_cast<const int32_t*>(base + at_tables);
  for (size_t i = 0; i < T; ++i) attn_[i] = {tables + b.table_of[i], b.positions[i]};
  packed_.resize(bytes);
  auto put = [&](size_t at, const void* src, size_t n) {
    if (n) std::memcpy(packed_.data() + at, src, n);
  };
  put(0, attn_.data(), T * sizeof(kernels::AttnToken));
  put(at_tokens, b.tokens.data(), T * i32);
  put(at_pos, b.positions.data(), T * i32);
  put(at_rows, b.logits_rows.data(), b.logits_rows.size() * i32);
  put(at_sampling, b.sampling.data(), b.sampling.size() * sizeof(kernels::RowSampling));
  put(at_tables, b.block_tables.data(), b.block_tables.size() * i32);
  be.upload(base, packed_.data(), bytes);
  return {reinterpret_cast<const int32_t*>(base + at_tokens), reinterpret_cast<const int32_t*>(base + at_pos),
          reinterpret_cast<const kernels::AttnToken*>(base), reinterpret_cast<const int32_t*>(base + at_rows),
          b.sampling.empty() ? nullptr : reinterpret_cast<const kernels::RowSampling*>(base + at_sampling)};
}

}  // namespace inferd::engine
