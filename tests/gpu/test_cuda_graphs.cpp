// Captured decode steps (CUDA graphs) against the same steps run eagerly, on a
// real GGUF model (INFERD_MODEL, else the default model in the cache): two CUDA
// backends, models and KV caches get the same step plans, one through an
// executor with graph sizes 1, 2, 4, 8 and one without. Every step's logits must
// be bitwise equal: batch 1, a batch of 3 padded to 4, and replays at many
// positions of one recording (contexts crossing KV blocks and attention's
// 128-position slices), so one graph serves every context length.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/executor.hpp"
#include "engine/gguf_reader.hpp"
#include "engine/kv/kv_cache.hpp"
#include "engine/models/model_registry.hpp"
#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/launch_keys.hpp"
#include "tests/gpu/cuda_runner.hpp"

using namespace inferd;
using test_cuda::Runner;
using test_cuda::model_path;
using test_cuda::uses;

TEST_CASE("CUDA graphs: replayed decode steps give the eager steps' logits bit for bit") {
  const std::string path = model_path();
  REQUIRE_MESSAGE(std::filesystem::exists(path), "no model at " << path << " (set INFERD_MODEL)");
  constexpr int kSeqs = 3, kBlocksPerSeq = 24;  // 384 positions each
  Runner eager(path, kSeqs * kBlocksPerSeq, {});
  Runner graphs(path, kSeqs * kBlocksPerSeq, {1, 2, 4, 8});
  const int vocab = eager.model->config().vocab;
  kernels::ShapeRegistry::global().clear();

  const auto tables = test_cuda::interleaved_tables(kSeqs, kBlocksPerSeq);
  std::vector<int32_t> next(kSeqs, 0), fed(kSeqs, 0);  // next token of each sequence; positions fed so far

  std::vector<float> want, got;
  int steps = 0;
  // One step: each (sequence, n) feeds n tokens, its next one first; both
  // runners, logits compared; a sequence's next token is the eager run's argmax.
  auto step = [&](const std::vector<std::pair<int, int>>& feeds) {
    const engine::StepPlan plan = test_cuda::feed_plan(static_cast<uint64_t>(++steps), feeds, tables, next, fed);
    eager.exec->execute(plan, want);
    graphs.exec->execute(plan, got);
    REQUIRE(want.size() == feeds.size() * size_t(vocab));
    REQUIRE(got.size() == want.size());
    if (std::memcmp(got.data(), want.data(), want.size() * sizeof(float)) != 0) {
      float worst = 0;
      for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
      FAIL_CHECK("step " << steps << " (" << feeds.size() << " sequences, the first at position "
                         << fed[feeds[0].first] - 1 << ") differs by up to " << worst);
    }
    for (size_t r = 0; r < feeds.size(); ++r) {
      const float* row = want.data() + r * vocab;
      next[feeds[r].first] = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
    }
  };
  auto decode = [&](std::vector<int> seqs, int n_steps) {
    std::vector<std::pair<int, int>> feeds;
    for (int s : seqs) feeds.emplace_back(s, 1);
    for (int i = 0; i < n_steps; ++i) step(feeds);
  };

  // Prefill, eager in both: one long prompt, then two short ones in one step.
  next = {1, 1, 1};
  step({{0, 240}});
  step({{1, 20}, {2, 5}});
  // Batch 1 from 240 to 300: positions cross KV blocks at 256, 272 and 288, and
  // attention's second and third 128-position slices begin.
  decode({0}, 60);
  // Batch 3, padded to 4: three contexts at once, crossing more blocks.
  decode({0, 1, 2}, 30);
  // Batch 1 again, after the 4-row graph was recorded; then batch 2, a size of its own.
  decode({0}, 10);
  decode({1, 2}, 8);

  namespace lk = kernels::launch_keys;
  MESSAGE("size 1: " << uses(lk::graph_capture(1)) << " recorded, " << uses(lk::graph_replay(1)) << " replayed; size 4: "
                     << uses(lk::graph_capture(4)) << " recorded, " << uses(lk::graph_replay(4)) << " replayed");
  // One recording serves every position: replays far outnumber recordings.
  CHECK(uses(lk::graph_capture(4)) == 1);
  CHECK(uses(lk::graph_replay(4)) == 29);
  // The 4-row step's logits buffer, wider, replaces the one the 1-row graph was
  // recorded with: that graph is recorded again, once.
  CHECK(uses(lk::graph_capture(1)) <= 2);
  CHECK(uses(lk::graph_capture(1)) + uses(lk::graph_replay(1)) == 70);
  CHECK(uses(lk::graph_capture(2)) == 1);
  CHECK(uses(lk::graph_replay(2)) == 7);
  CHECK(uses(lk::graph_capture(8)) == 0);
}
