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

using namespace inferd;

namespace {

std::string model_path() {
  if (const char* m = std::getenv("INFERD_MODEL")) return m;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") + "/.cache/inferd/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

// One model on its own CUDA backend, with its own KV cache and executor.
struct Runner {
  std::unique_ptr<kernels::Backend> be = kernels::make_cuda_backend(0);
  std::unique_ptr<engine::GgufFile> file;
  std::unique_ptr<engine::Model> model;
  std::unique_ptr<engine::KvCache> kv;
  std::unique_ptr<engine::Executor> exec;

  Runner(const std::string& path, int blocks, std::vector<int> graph_sizes) {
    file = engine::GgufFile::open(path);
    model = engine::load_model(*file, *be);
    const auto& mc = model->config();
    kv = std::make_unique<engine::KvCache>(
        engine::KvGeometry{mc.n_layers, mc.n_kv_heads, mc.head_dim, 16, blocks, kernels::DType::F16}, *be);
    exec = std::make_unique<engine::Executor>(*model, *kv, *be, std::move(graph_sizes));
  }
};

uint64_t uses(const kernels::LaunchKey& k) {
  for (const auto& [key, use] : kernels::ShapeRegistry::global().snapshot())
    if (key == k.key()) return use.count;
  return 0;
}

}  // namespace

TEST_CASE("CUDA graphs: replayed decode steps give the eager steps' logits bit for bit") {
  const std::string path = model_path();
  REQUIRE_MESSAGE(std::filesystem::exists(path), "no model at " << path << " (set INFERD_MODEL)");
  constexpr int kSeqs = 3, kBlocksPerSeq = 24;  // 384 positions each
  Runner eager(path, kSeqs * kBlocksPerSeq, {});
  Runner graphs(path, kSeqs * kBlocksPerSeq, {1, 2, 4, 8});
  const int vocab = eager.model->config().vocab;
  kernels::ShapeRegistry::global().clear();

  // Sequence s owns blocks s, s + 3, s + 6, ...: interleaved, as a shared cache hands them out.
  std::vector<std::vector<int32_t>> tables(kSeqs);
  for (int s = 0; s < kSeqs; ++s)
    for (int b = 0; b < kBlocksPerSeq; ++b) tables[s].push_back(b * kSeqs + s);
  std::vector<int32_t> next(kSeqs, 0), fed(kSeqs, 0);  // next token of each sequence; positions fed so far

  std::vector<float> want, got;
  int steps = 0;
  // One step: each (sequence, n) feeds n tokens, its next one first; both
  // runners, logits compared; a sequence's next token is the eager run's argmax.
  auto step = [&](const std::vector<std::pair<int, int>>& feeds) {
    engine::StepPlan plan;
    plan.step = static_cast<uint64_t>(++steps);
    for (auto [s, n] : feeds) {
      engine::ScheduledSeq q;
      q.seq = static_cast<engine::SeqId>(s + 1);
      q.start = fed[s];
      q.tokens.push_back(next[s]);
      for (int i = 1; i < n; ++i) q.tokens.push_back(200 + (fed[s] + i) * 37 % 9000);
      q.block_table = tables[s];
      q.sample = true;
      plan.seqs.push_back(std::move(q));
      fed[s] += n;
    }
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
