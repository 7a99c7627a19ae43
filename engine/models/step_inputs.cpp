#include "engine/models/step_inputs.hpp"

#include <cstring>

namespace inferd::engine {
namespace {

size_t align8(size_t n) { return (n + 7) / 8 * 8; }

}  // namespace

StepInputs StepStaging::stage(kernels::Backend& be, const StepBatch& b) {
  const size_t T = b.size();
  attn_.resize(T);
  if (be.host_visible()) {
    for (size_t i = 0; i < T; ++i) attn_[i] = {b.block_tables.data() + b.table_of[i], b.positions[i]};
    return {b.tokens.data(), b.positions.data(), attn_.data(), b.logits_rows.data()};
  }
  // One packed upload: [tokens][positions][logits rows][block tables][attention tokens].
  const size_t i32 = sizeof(int32_t);
  const size_t at_pos = T * i32, at_rows = at_pos + T * i32, at_tables = at_rows + b.logits_rows.size() * i32;
  const size_t at_attn = align8(at_tables + b.block_tables.size() * i32);
  const size_t bytes = at_attn + T * sizeof(kernels::AttnToken);
  if (device_.bytes() < bytes) device_ = be.alloc(bytes * 2);
  auto* base = device_.as<std::byte>();
  const auto* tables = reinterpret_cast<const int32_t*>(base + at_tables);
  for (size_t i = 0; i < T; ++i) attn_[i] = {tables + b.table_of[i], b.positions[i]};
  packed_.resize(bytes);
  auto put = [&](size_t at, const void* src, size_t n) {
    if (n) std::memcpy(packed_.data() + at, src, n);
  };
  put(0, b.tokens.data(), T * i32);
  put(at_pos, b.positions.data(), T * i32);
  put(at_rows, b.logits_rows.data(), b.logits_rows.size() * i32);
  put(at_tables, b.block_tables.data(), b.block_tables.size() * i32);
  put(at_attn, attn_.data(), T * sizeof(kernels::AttnToken));
  be.upload(base, packed_.data(), bytes);
  return {reinterpret_cast<const int32_t*>(base), reinterpret_cast<const int32_t*>(base + at_pos),
          reinterpret_cast<const kernels::AttnToken*>(base + at_attn), reinterpret_cast<const int32_t*>(base + at_rows)};
}

}  // namespace inferd::engine
