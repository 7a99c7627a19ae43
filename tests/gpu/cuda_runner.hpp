// What the GPU tests that run a real model step by step share: the model on
// its own CUDA backend with its own KV cache and executor, and how often a
// launch key was used since the shape registry was last cleared.
#pragma once
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/executor.hpp"
#include "engine/gguf_reader.hpp"
#include "engine/kv/kv_cache.hpp"
#include "engine/models/model_registry.hpp"
#include "engine/sched/step_plan.hpp"
#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/launch_keys.hpp"
#include "kernels/shape_registry.hpp"

namespace test_cuda {

// The real model the tests run: INFERD_MODEL, else the default model in the cache.
inline std::string model_path() {
  if (const char* m = std::getenv("INFERD_MODEL")) return m;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") + "/.cache/inferd/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

struct Runner {
  std::unique_ptr<inferd::kernels::Backend> be;
  std::unique_ptr<inferd::engine::GgufFile> file;
  std::unique_ptr<inferd::engine::Model> model;
  std::unique_ptr<inferd::engine::KvCache> kv;
  std::unique_ptr<inferd::engine::Executor> exec;

  // `blocks` KV blocks of 16 positions; `backend` defaults to device 0 with default options.
  Runner(const std::string& path, int blocks, std::vector<int> graph_sizes,
         std::unique_ptr<inferd::kernels::Backend> backend = inferd::kernels::make_cuda_backend(0))
      : be(std::move(backend)) {
    namespace engine = inferd::engine;
    file = engine::GgufFile::open(path);
    model = engine::load_model(*file, *be);
    const auto& mc = model->config();
    kv = std::make_unique<engine::KvCache>(
        engine::KvGeometry{mc.n_layers, mc.n_kv_heads, mc.head_dim, 16, blocks, inferd::kernels::DType::F16}, *be);
    exec = std::make_unique<engine::Executor>(*model, *kv, *be, std::move(graph_sizes));
  }
};

// Block tables of `seqs` sequences whose blocks interleave (sequence s owns
// blocks s, s + seqs, s + 2 seqs, ...), as a shared cache hands them out.
inline std::vector<std::vector<int32_t>> interleaved_tables(int seqs, int blocks_per_seq) {
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(seqs));
  for (int s = 0; s < seqs; ++s)
    for (int b = 0; b < blocks_per_seq; ++b) tables[static_cast<size_t>(s)].push_back(b * seqs + s);
  return tables;
}

// A step where each (sequence s, n) feeds n tokens from position fed[s]: its
// next token, then filler tokens (`filler` + position x 37 mod 9000); fed
// advances. Every sequence samples.
inline inferd::engine::StepPlan feed_plan(uint64_t step, const std::vector<std::pair<int, int>>& feeds,
                                          const std::vector<std::vector<int32_t>>& tables,
                                          const std::vector<int32_t>& next, std::vector<int32_t>& fed,
                                          int32_t filler = 200) {
  namespace engine = inferd::engine;
  engine::StepPlan plan;
  plan.step = step;
  for (auto [s, n] : feeds) {
    engine::ScheduledSeq q;
    q.seq = static_cast<engine::SeqId>(s + 1);
    q.start = fed[static_cast<size_t>(s)];
    q.tokens.push_back(next[static_cast<size_t>(s)]);
    for (int i = 1; i < n; ++i) q.tokens.push_back(filler + (q.start + i) * 37 % 9000);
    q.block_table = tables[static_cast<size_t>(s)];
    q.sample = true;
    plan.seqs.push_back(std::move(q));
    fed[static_cast<size_t>(s)] += n;
  }
  return plan;
}

inline uint64_t uses(const inferd::kernels::LaunchKey& k) {
  for (const auto& [key, use] : inferd::kernels::ShapeRegistry::global().snapshot())
    if (key == k.key()) return use.count;
  return 0;
}

}  // namespace test_cuda
