// Sizing the KV cache by device memory (--gpu-memory-utilization) as plain arithmetic.
#include <doctest/doctest.h>

#include <stdexcept>
#include <string>

#include "engine/kv/gpu_kv_budget.hpp"
#include "engine/models/model.hpp"

using namespace inferd::engine;

namespace {

constexpr size_t GiB = size_t(1) << 30, MiB = size_t(1) << 20;

// A 64 GiB device with 10 GiB in use after the weights; 2 MiB blocks. The
// shares are binary fractions, so the limits are exact.
GpuKvBudget budget() {
  GpuKvBudget b;
  b.total = 64 * GiB;
  b.free_after_weights = 54 * GiB;
  b.fraction = 0.875;
  b.bytes_per_block = 2 * MiB;
  b.scratch = 1 * GiB;
  b.min_blocks = 257;  // 4096 tokens of 16, plus one
  b.max_model_len = 4096;
  b.weights = 9 * GiB;
  return b;
}

std::string error_of(const GpuKvBudget& b) {
  try {
    plan_gpu_kv_blocks(b);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("gpu kv budget: the cache gets the share's remainder after what is in use and the scratch") {
  const GpuKvPlan p = plan_gpu_kv_blocks(budget());
  CHECK(p.limit == 56 * GiB);
  CHECK(p.in_use == 10 * GiB);
  // 56 GiB - 10 GiB - 1 GiB = 45 GiB of 2 MiB blocks.
  CHECK(p.blocks == 45 * 512);
  CHECK(p.kv_bytes == 45 * GiB);
  CHECK(p.in_use + 1 * GiB + p.kv_bytes <= p.limit);
}

TEST_CASE("gpu kv budget: never more than is free, whatever the share") {
  auto b = budget();
  b.fraction = 1.0;
  b.free_after_weights = 5 * GiB;
  b.total = 64 * GiB;  // 59 GiB in use (another process too): 64 - 59 - 1 = 4 GiB
  CHECK(plan_gpu_kv_blocks(b).blocks == 4 * 512);
  b.scratch = 0;
  CHECK(plan_gpu_kv_blocks(b).kv_bytes == 5 * GiB);
}

TEST_CASE("gpu kv budget: weights past the share is an error naming the sizes and the flag") {
  auto b = budget();
  b.fraction = 0.125;  // 8 GiB allowed, 10 GiB in use
  const std::string e = error_of(b);
  CHECK(e.find("--gpu-memory-utilization 0.125 allows 8.00 GiB of the device's 64.00 GiB, but 10.00 GiB are in use once "
               "the weights are uploaded (the weights 9.00 GiB") == 0);
  CHECK(e.find("a step's buffers need up to 1024 MiB") != std::string::npos);
  // In use plus the scratch exactly at the limit leaves nothing either.
  b.fraction = 11.0 / 64;
  CHECK(error_of(b).find("no room is left for the KV cache") != std::string::npos);
}

TEST_CASE("gpu kv budget: less than one sequence of max_model_len is an error naming both") {
  auto b = budget();
  b.fraction = 11.5 / 64;  // 0.5 GiB for the cache: 256 blocks, one short
  const std::string e = error_of(b);
  CHECK(e.find("leaves the KV cache 512 MiB (256 blocks)") != std::string::npos);
  CHECK(e.find("one sequence of max_model_len 4096 needs 514 MiB (257 blocks)") != std::string::npos);
  CHECK(e.find("raise --gpu-memory-utilization, lower --max-model-len") != std::string::npos);
  b.fraction = 11.75 / 64;
  CHECK(plan_gpu_kv_blocks(b).blocks >= 257);
}

TEST_CASE("gpu kv budget: the step scratch bound grows with the batch and covers the logits") {
  ModelConfig mc;
  mc.n_layers = 32;
  mc.dim = 4096;
  mc.n_heads = 32;
  mc.n_kv_heads = mc.kv_heads_here = 8;
  mc.head_dim = 128;
  mc.ffn_dim = 14336;
  mc.vocab = 128256;
  const size_t small = step_scratch_bound(mc, 256, 16), big = step_scratch_bound(mc, 2048, 64);
  CHECK(small > kScratchMargin);
  CHECK(big > small);
  // At least the activations the model reserves for 2048 tokens: gate and up alone are 2 x 2048 x 14336 floats.
  CHECK(big - kScratchMargin > size_t(2) * 2048 * 14336 * 4);
  // The logits of 64 rows of 128256 floats.
  CHECK(step_scratch_bound(mc, 2048, 64) - step_scratch_bound(mc, 2048, 0) == size_t(64) * 128256 * 4);
  // Rows of logits beyond the batch's tokens cannot happen.
  CHECK(step_scratch_bound(mc, 16, 1000) == step_scratch_bound(mc, 16, 16));
}
