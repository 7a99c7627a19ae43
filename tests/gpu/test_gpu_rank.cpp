// A GPU rank's data path on one GPU: the engine on CUDA given an NCCL group of
// one rank runs every collective a rank of a larger group runs (each
// all-reduce queued on the backend's stream among its kernels, the logits'
// all-gather in device memory, the tokens drawn on the device, decode steps
// captured as CUDA graphs with their collectives, the KV cache's block count
// agreed through an all-gather), so its greedy tokens must equal the plain
// engine's on the same GPU bit for bit: a sum or a gather over one rank
// copies. After an abort and a re-formed group (a new communicator), the
// graphs holding the old one are recorded anew and the tokens stay the same.
// Two ranks need two GPUs (docs/OPERATIONS.md, "Tensor parallel").
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "comm/nccl_collectives.hpp"
#include "comm/tcp_store.hpp"
#include "engine/engine.hpp"
#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/launch_keys.hpp"
#include "tests/engine_generate.hpp"
#include "tests/gpu/cuda_runner.hpp"

using namespace inferd;
using namespace std::chrono_literals;

TEST_CASE("nccl: a GPU rank's forward pass through a group of one gives the plain engine's greedy tokens") {
  const std::string path = test_cuda::model_path();
  REQUIRE_MESSAGE(std::filesystem::exists(path), "no model at " << path << " (set INFERD_MODEL)");
  engine::EngineOptions o;
  o.model_path = path;
  o.max_model_len = 256;
  o.max_num_batched_tokens = 64;  // the longer prompt in chunks
  o.kv_cache_bytes = 32 << 20;
  o.backend = [] { return kernels::make_cuda_backend(0); };
  std::vector<std::vector<int32_t>> prompts = {{1, 504, 3303, 314, 260, 1345}, {1, 30, 800}, {1, 31, 807, 9}};
  std::vector<int32_t> longer;
  for (int i = 0; i < 100; ++i) longer.push_back(200 + (i * 131) % 20000);
  prompts.push_back(longer);

  std::vector<test_engine::Generated> want;
  {
    engine::Engine plain(o);
    want = test_engine::generate_greedy(plain, prompts, 16);
  }
  comm::StoreServer server("127.0.0.1", 0);
  comm::NcclOptions no;
  no.store_port = server.port();
  no.rendezvous_timeout = 60s;
  no.op_timeout = 60s;
  comm::NcclCollectives group(no);
  o.tp = {0, 1, &group};
  o.gpu_memory_utilization = 0.2;  // sized by the device: the group agrees on the block count
  engine::Engine rank(o);
  REQUIRE(rank.graph_sizes() == std::vector<int>{1, 2, 4, 8});
  namespace lk = kernels::launch_keys;
  kernels::ShapeRegistry::global().clear();
  const auto got = test_engine::generate_greedy(rank, prompts, 16);
  for (size_t p = 0; p < prompts.size(); ++p) CHECK_MESSAGE(got[p].ids == want[p].ids, "prompt ", p);
  const int replays = test_cuda::uses(lk::graph_replay(1)) + test_cuda::uses(lk::graph_replay(2)) +
                      test_cuda::uses(lk::graph_replay(4));
  MESSAGE("captured steps: " << replays << " replays");
  CHECK(replays > 0);

  // The group re-forms as generation 1: a new communicator, which no recording holds yet.
  group.abort("test: the group re-forms");
  group.reinit(1);
  kernels::ShapeRegistry::global().clear();
  const auto again = test_engine::generate_greedy(rank, prompts, 16);
  for (size_t p = 0; p < prompts.size(); ++p) CHECK_MESSAGE(again[p].ids == want[p].ids, "after reinit: prompt ", p);
  // Recorded anew: the generation is in the signature.
  CHECK(test_cuda::uses(lk::graph_capture(1)) + test_cuda::uses(lk::graph_capture(2)) +
            test_cuda::uses(lk::graph_capture(4)) >=
        1);
}
