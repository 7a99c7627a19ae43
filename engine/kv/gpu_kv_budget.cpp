#include "engine/kv/gpu_kv_budget.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

#include "engine/models/model.hpp"

namespace inferd::engine {

namespace {
std::string gib(size_t bytes) { return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / (1ull << 30)); }
std::string mib(size_t bytes) { return fmt::format("{:.0f} MiB", static_cast<double>(bytes) / (1ull << 20)); }
}  // namespace

size_t step_scratch_bound(const ModelConfig& mc, int64_t T, int64_t R) {
  R = std::min(R, T);
  const int64_t D = mc.dim, H = mc.n_heads, Hkv = std::max(mc.kv_heads_here, 1), hd = mc.head_dim, F = mc.ffn_dim;
  // engine/models/decoder.cpp's activation buffers: x, h, q (also the normed rows
  // for the logits), k, v, att, gate, up, logits.
  const int64_t activations = 2 * T * D + std::max(T * H * hd, R * D) + 2 * T * Hkv * hd + T * H * hd + 2 * T * F +
                              R * int64_t(mc.vocab);
  // The CUDA backend's matmul quantizes its input: per token `cols` bytes and
  // a float2 per 32 of them, for the widest input.
  const int64_t cols = std::max({D, F, H * hd});
  const int64_t matmul = T * (cols + cols / 32 * 8);
  // Its attention splits only launches of fewer blocks than 4 per
  // multiprocessor, into at most that many slices: scratch (hd + 2) floats per
  // token, head and slice, bounded here for up to 256 multiprocessors.
  const int64_t attention = 2 * 4 * 256 * (H / Hkv + 1) * (hd + 2);
  return static_cast<size_t>((activations + attention) * int64_t(sizeof(float)) + matmul) + kScratchMargin;
}

GpuKvPlan plan_gpu_kv_blocks(const GpuKvBudget& b) {
  if (!(b.fraction > 0 && b.fraction <= 1)) throw std::invalid_argument("--gpu-memory-utilization must be in (0, 1]");
  if (b.bytes_per_block == 0) throw std::invalid_argument("a KV block of 0 bytes");
  GpuKvPlan p;
  p.limit = static_cast<size_t>(b.fraction * static_cast<double>(b.total));
  p.in_use = b.total - std::min(b.free_after_weights, b.total);
  const std::string weights = b.weights ? " (the weights " + gib(b.weights) + ", the CUDA context and any other process)" : "";
  if (p.in_use + b.scratch >= p.limit)
    throw std::invalid_argument(fmt::format(
        "--gpu-memory-utilization {} allows {} of the device's {}, but {} are in use once the weights are "
        "uploaded{} and a step's buffers need up to {}: no room is left for the KV cache; raise "
        "--gpu-memory-utilization, lower --max-num-batched-tokens or use a smaller model",
        b.fraction, gib(p.limit), gib(b.total), gib(p.in_use), weights, mib(b.scratch)));
  const size_t room = std::min(p.limit - p.in_use - b.scratch, b.free_after_weights);
  const size_t blocks = std::min<size_t>(room / b.bytes_per_block, std::numeric_limits<int>::max());
  p.blocks = static_cast<int>(blocks);
  p.kv_bytes = blocks * b.bytes_per_block;
  if (p.blocks < b.min_blocks)
    throw std::invalid_argument(fmt::format(
        "--gpu-memory-utilization {} leaves the KV cache {} ({} blocks) of the device's {} ({} limit; {} in use once "
        "the weights are uploaded{}; up to {} for a step's buffers), but one sequence of max_model_len {} needs {} "
        "({} blocks): raise --gpu-memory-utilization, lower --max-model-len or --max-num-batched-tokens",
        b.fraction, mib(p.kv_bytes), p.blocks, gib(b.total), gib(p.limit), gib(p.in_use), weights, mib(b.scratch),
        b.max_model_len, mib(size_t(b.min_blocks) * b.bytes_per_block), b.min_blocks));
  return p;
}

}  // namespace inferd::engine
