// Small models of each format and architecture on the CUDA backend against
// transformers in float32, with the unit tests' goldens (tests/golden: the BF16
// HF checkpoint directory, made by tools/make_hf_golden.py; the Qwen2 and Qwen3
// GGUFs, by tools/make_qwen_golden.py; Gemma 2 and 3, by tools/make_gemma_golden.py): logits within a tolerance at every
// prompt position and the same 16 greedy tokens, with F32 weights and cache
// (exact precision) and with the weights as stored and an F16 cache (fast).
#include <doctest/doctest.h>

#include <string>

#include "kernels/cuda/cuda_backend.hpp"
#include "tests/unit/golden_runner.hpp"

using namespace test_golden;

namespace {

std::string golden_dir() { return std::string(INFERD_TEST_SOURCE_DIR) + "/tests/golden/"; }

void check_on_cuda(const std::string& model, const std::string& golden, const std::string& label,
                   double fast_tol = 5e-2) {
  const auto g = read_golden(golden_dir() + golden);
  {
    Runner r(golden_dir() + model, engine::Precision::Exact, kernels::make_cuda_backend(0));
    // The CPU backend reaches 1e-3 here; the GPU's float matmuls and
    // reductions sum in other orders.
    check_cases(r, g, true, 1e-2, label + " exact");
  }
  Runner r(golden_dir() + model, engine::Precision::Fast, kernels::make_cuda_backend(0));
  check_cases(r, g, false, fast_tol, label + " fast");
}

}  // namespace

TEST_CASE("CUDA: an HF safetensors checkpoint matches transformers") {
  // Prompts of 16 tokens or more run BF16 weights through tensor-core GEMMs,
  // which round the activations to BF16 too (8 significant bits): measured 0.10
  // on an H100, where the CPU's float activations stay within 1.3e-2.
  check_on_cuda("hf-tiny", "hf_tiny.json", "hf", 0.15);
}

TEST_CASE("CUDA: Qwen2 (projection biases, one add_rows launch) matches transformers") {
  check_on_cuda("qwen2-tiny.gguf", "qwen2_tiny.json", "qwen2");
}

TEST_CASE("CUDA: Qwen3 (per-head q/k norm, key_length head width) matches transformers") {
  check_on_cuda("qwen3-tiny.gguf", "qwen3_tiny.json", "qwen3");
}

// Fast precision: prompts of 16 tokens or more run the F16 weights through
// tensor-core GEMMs, which round the activations to F16: measured 0.052
// (Gemma 2) and 0.078 (Gemma 3) on an H100, where the CPU's float activations
// stay within 0.024; exact precision is within 5.2e-5 there.
TEST_CASE("CUDA: Gemma 2 (soft-capped scores and logits, sliding window, GELU) matches transformers") {
  check_on_cuda("gemma2-tiny.gguf", "gemma2_tiny.json", "gemma2", 0.1);
}

TEST_CASE("CUDA: Gemma 3 (q/k norm, 5:1 local:global, local RoPE base) matches transformers") {
  check_on_cuda("gemma3-tiny.gguf", "gemma3_tiny.json", "gemma3", 0.1);
}
