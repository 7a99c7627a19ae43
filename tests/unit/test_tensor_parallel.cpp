// A model split across tensor-parallel ranks computes what the whole model does:
// the default model (9 heads over 3 kv heads, 1536 hidden columns, 49,152 ids)
// at TP=2 (uneven: 2 kv heads and 1 kv head) and TP=3, each rank in its own
// thread with its own backend and KV cache, against TP=1 on the same steps; and
// the tiny Qwen2 and Qwen3 fixtures (tests/golden) at TP=2, their q/k/v biases
// sliced with the heads and their per-head q/k norms held by every rank.
// The ranks meet through an in-process stand-in for the data plane (the real
// ones, Gloo and NCCL, have their own tests); it sums in rank order. On a
// stand-in for a capturing backend (a GPU's graphs), decode steps are captured
// with their collectives, by the model alone and by a head Engine beside a
// RankWorker, which also agree on a KV cache sized by their devices.
// Only the order of float sums differs from the whole model (each rank's partial
// dot products over whole quantization blocks, then the all-reduce). In exact
// precision that moves logits by ~1e-4. In fast precision activations are
// rounded to int8 blocks before each matmul, and a value that lands on the
// other side of a rounding step moves a whole int8 step: logits drift by up to
// ~1.5 on this model, the same drift that separates inferd from llama.cpp
// (test_model_golden.cpp). So fast precision is checked teacher-forced as the
// golden test checks it: the same greedy choice at >= 90% of steps, and where
// the choice differs the whole model's two candidates are within 0.75.
#include <doctest/doctest.h>

#include <array>
#include <barrier>
#include <optional>
#include <mutex>
#include <deque>
#include <condition_variable>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <thread>

#include "engine/engine.hpp"
#include "engine/gguf_reader.hpp"
#include "engine/rank_worker.hpp"
#include "engine/kv/kv_cache.hpp"
#include "engine/models/model_registry.hpp"
#include "kernels/launch_keys.hpp"
#include "tests/engine_generate.hpp"
#include "tests/unit/capturing_backend.hpp"
#include "tests/unit/test_paths.hpp"

using namespace inferd;

namespace {

struct Meeting {
  explicit Meeting(int n) : n(n), sync(n), in(n) {}
  int n;
  std::barrier<> sync;
  std::vector<const float*> in;
};

class ThreadCollectives final : public comm::Collectives {
 public:
  ThreadCollectives(Meeting& m, int rank) : m_(m), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return m_.n; }
  void all_reduce_sum(float* data, size_t n) override {
    std::vector<float> sum(n, 0.0f);
    m_.in[rank_] = data;
    m_.sync.arrive_and_wait();
    for (int r = 0; r < m_.n; ++r)
      for (size_t i = 0; i < n; ++i) sum[i] += m_.in[r][i];
    m_.sync.arrive_and_wait();
    std::copy(sum.begin(), sum.end(), data);
  }
  void all_gather(const float* in, size_t n, float* out) override {
    m_.in[rank_] = in;
    m_.sync.arrive_and_wait();
    for (int r = 0; r < m_.n; ++r) std::copy_n(m_.in[r], n, out + r * n);
    m_.sync.arrive_and_wait();
  }
  void broadcast(void*, size_t, int) override { FAIL("not used by the forward pass"); }
  void barrier() override { m_.sync.arrive_and_wait(); }
  void abort(const std::string&) override {}
  void reinit(int g) override { generation_ = g; }
  int generation() const override { return generation_; }

 private:
  Meeting& m_;
  int rank_;
  int generation_ = 0;
};

// One rank: its share of the model and its KV cache; runs the same steps as its peers.
struct Rank {
  std::unique_ptr<kernels::Backend> backend;
  std::unique_ptr<engine::GgufFile> file;
  std::unique_ptr<engine::Model> model;
  std::unique_ptr<engine::KvCache> kv;
  Rank(const std::string& path, engine::Precision p, const engine::TensorParallel& tp,
       std::unique_ptr<kernels::Backend> be = kernels::make_cpu_backend(1))
      : backend(std::move(be)) {
    file = engine::GgufFile::open(path);
    model = engine::load_model(*file, *backend, p, {}, tp);
    const auto& mc = model->config();
    kv = std::make_unique<engine::KvCache>(
        engine::KvGeometry{mc.n_layers, mc.kv_heads_here, mc.head_dim, 16, 32,
                           p == engine::Precision::Exact ? kernels::DType::F32 : kernels::DType::F16},
        *backend);
  }
};

// Two sequences: prompts prefilled together, then `steps` greedy decode steps of
// both; returns every logits row the steps produced (2 per step). With `forced`
// (another run's rows) the steps feed that run's greedy tokens instead of their
// own, so a near tie decided the other way does not change what follows. With
// `captured` (a backend that captures steps), the decode steps run as its
// captured step 2.
using Rows = std::vector<std::vector<float>>;
Rows run(engine::Model& model, engine::KvCache& kv, int steps, const Rows* forced,
         kernels::Backend* captured = nullptr) {
  const std::vector<std::vector<int32_t>> prompts = {{1, 504, 3458, 314, 260, 3316, 282, 4649, 30, 1030},
                                                     {9690, 28, 506, 3575, 429}};
  std::vector<std::vector<int32_t>> tables = {{0, 1, 2, 3, 4, 5, 6, 7}, {16, 17, 18, 19, 20, 21, 22, 23}};
  const int vocab = model.config().vocab;
  std::vector<std::vector<float>> rows;
  std::vector<float> logits(2 * size_t(vocab));
  std::vector<int32_t> next(2), pos(2);
  engine::StepBatch b;
  for (int s = 0; s < 2; ++s) {
    const int32_t t = b.add_table(tables[s]);
    for (size_t i = 0; i < prompts[s].size(); ++i)
      b.add(prompts[s][i] % vocab, int32_t(i), t, i + 1 == prompts[s].size());  // ids of any vocabulary
    pos[s] = int32_t(prompts[s].size());
  }
  for (int step = 0; step <= steps; ++step) {
    if (captured && step > 0)
      captured->run_captured(2, [&] { model.forward(b, kv, logits.data()); });
    else
      model.forward(b, kv, logits.data());
    b.clear();
    for (int s = 0; s < 2; ++s) {
      const float* row = logits.data() + size_t(s) * vocab;
      rows.emplace_back(row, row + vocab);
      if (forced) row = (*forced)[rows.size() - 1].data();
      next[s] = int32_t(std::max_element(row, row + vocab) - row);
      b.add(next[s], pos[s]++, b.add_table(tables[s]), true);
    }
  }
  return rows;
}

Rows run_group(const std::string& path, engine::Precision p, int n, int steps, const Rows* forced = nullptr) {
  Meeting meeting(n);
  std::vector<Rows> out(n);
  std::vector<std::thread> threads;
  std::vector<std::string> errors(n);
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        ThreadCollectives comm(meeting, r);
        Rank rank(path, p, engine::TensorParallel{r, n, n > 1 ? &comm : nullptr});
        out[r] = run(*rank.model, *rank.kv, steps, forced);
      } catch (const std::exception& e) {
        errors[r] = e.what();
        std::terminate();  // a rank that stops leaves its peers at the barrier
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 1; r < n; ++r) CHECK(out[r] == out[0]);  // every rank gathers the same logits
  return out[0];
}

void compare(const std::string& path, engine::Precision p, int n, float tol, int min_same_pct) {
  REQUIRE_MESSAGE(std::filesystem::exists(path), path << " missing (tools/bootstrap.sh fetches the default model)");
  const int steps = 24;
  const auto whole = run_group(path, p, 1, steps);
  const auto split = run_group(path, p, n, steps, &whole);
  REQUIRE(whole.size() == split.size());
  float worst = 0, widest_tie = 0;
  int same = 0;
  for (size_t i = 0; i < whole.size(); ++i) {
    const auto& a = whole[i];
    const auto& b = split[i];
    for (size_t k = 0; k < a.size(); ++k) worst = std::max(worst, std::abs(a[k] - b[k]));
    const auto ia = std::max_element(a.begin(), a.end()) - a.begin(), ib = std::max_element(b.begin(), b.end()) - b.begin();
    same += ia == ib;
    widest_tie = std::max(widest_tie, a[ia] - a[ib]);
  }
  const std::string what = p == engine::Precision::Exact ? "exact" : "fast";
  MESSAGE(path << " TP=" << n << " " << what << ": largest logit difference " << worst
                << ", greedy tokens equal " << same << "/" << whole.size());
  CHECK(worst < tol);
  CHECK(same * 100 >= min_same_pct * int(whole.size()));
  CHECK(widest_tie < 0.75f);
}

}  // namespace

TEST_CASE("tensor parallel: exact precision at TP=2 (uneven heads) and TP=3 gives the whole model's logits" * doctest::test_suite("whole_model")) {
  compare(test_paths::default_model(), engine::Precision::Exact, 2, 1e-3f, 100);
  compare(test_paths::default_model(), engine::Precision::Exact, 3, 1e-3f, 100);
}

TEST_CASE("tensor parallel: fast precision at TP=2 and TP=3 agrees with the whole model up to int8 rounding" * doctest::test_suite("whole_model")) {
  compare(test_paths::default_model(), engine::Precision::Fast, 2, 3.0f, 90);
  compare(test_paths::default_model(), engine::Precision::Fast, 3, 3.0f, 90);
}

TEST_CASE("tensor parallel: Qwen2 (sliced q/k/v biases) and Qwen3 (per-head q/k norms) at TP=2 give the whole model's logits") {
  const std::string golden = test_paths::source_dir() + "/tests/golden/";
  compare(golden + "qwen2-tiny.gguf", engine::Precision::Exact, 2, 1e-3f, 100);
  compare(golden + "qwen3-tiny.gguf", engine::Precision::Exact, 2, 1e-3f, 100);
}

TEST_CASE("tensor parallel: Gemma 2 over 1,999 ids (the last rank's slice shorter), soft-capped, at TP=2") {
  // Each rank caps its own ids before the gather; the last rank's block is
  // padded at its end to the common width (DecoderModel::gather_logits).
  compare(test_paths::source_dir() + "/tests/golden/gemma2-odd-vocab.gguf", engine::Precision::Exact, 2, 1e-3f, 100);
}

// Decode steps captured with their collectives, as a GPU rank's CUDA graphs
// hold its NCCL ops: each rank's stand-in for a capturing backend records a
// step's ops, its all-reduces and its logits' all-gather once and replays them,
// and the group meets in each replayed collective as in an eager one. Every
// rank's logits equal the eager group's bit for bit; a group re-formed under a
// new generation records its steps anew instead of replaying the old group's.
TEST_CASE("tensor parallel: decode steps captured with their collectives give the eager group's logits at TP=2") {
  const std::string path = test_paths::default_model();
  REQUIRE_MESSAGE(std::filesystem::exists(path), path << " missing (tools/bootstrap.sh fetches the default model)");
  constexpr int n = 2, steps = 5;
  Meeting meeting(n);
  std::vector<Rows> eager(n), captured(n), reformed(n);
  std::vector<int> records(n), replays(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        ThreadCollectives comm(meeting, r);
        const engine::TensorParallel tp{r, n, &comm};
        {
          Rank plain(path, engine::Precision::Exact, tp);
          eager[r] = run(*plain.model, *plain.kv, steps, nullptr);
        }
        auto backend = std::make_unique<test_capture::CapturingBackend>();
        test_capture::CapturingBackend* capturing = backend.get();
        Rank rank(path, engine::Precision::Exact, tp, std::move(backend));
        captured[r] = run(*rank.model, *rank.kv, steps, nullptr, capturing);
        comm.reinit(1);
        reformed[r] = run(*rank.model, *rank.kv, steps, nullptr, capturing);
        records[r] = capturing->records[2];
        replays[r] = capturing->replays[2];
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        std::terminate();  // a rank that stops leaves its peers at the barrier
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    CHECK_MESSAGE(captured[r] == eager[0], "rank ", r);
    CHECK_MESSAGE(reformed[r] == eager[0], "rank ", r, " after the group re-formed");
    CHECK(records[r] == 2);                 // once per generation
    CHECK(replays[r] == 2 * (steps - 1));   // every other decode step
  }
}

namespace {

// A head Engine (rank 0) and a RankWorker (rank 1) in this process, the worker
// running the head's plans on a thread of its own as the daemon's worker does.
// `capturing`: both on stand-ins for a capturing backend, and with `free_mib`,
// each a device of 1,000 MiB with that much free, whose KV cache is sized by
// --gpu-memory-utilization 0.9. Returns the head's greedy tokens, each rank's
// count of captured steps recorded and replayed, and its KV cache's blocks.
struct GroupRun {
  std::vector<test_engine::Generated> out;
  int records[2] = {0, 0}, replays[2] = {0, 0}, blocks[2] = {0, 0};
};
GroupRun run_head_and_worker(bool capturing, const std::vector<std::vector<int32_t>>& prompts,
                             std::array<size_t, 2> free_mib = {0, 0}) {
  Meeting meeting(2);
  ThreadCollectives head_comm(meeting, 0), worker_comm(meeting, 1);
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::optional<engine::StepPlan>> plans;  // nullopt: stop
  test_capture::CapturingBackend* backends[2] = {nullptr, nullptr};
  auto options = [&](int rank, comm::Collectives* c) {
    engine::EngineOptions o = test_engine::small_engine(test_paths::default_model());
    o.max_num_seqs = 4;
    o.tp = {rank, 2, c};
    if (free_mib[rank] > 0) o.gpu_memory_utilization = 0.9;
    if (capturing)
      o.backend = [&backends, rank, free = free_mib[rank]]() -> std::unique_ptr<kernels::Backend> {
        auto b = std::make_unique<test_capture::CapturingBackend>();
        if (free > 0) b->memory = kernels::MemoryInfo{free << 20, size_t(1000) << 20};
        backends[rank] = b.get();
        return b;
      };
    return o;
  };
  GroupRun r;
  auto count = [&](int rank) {  // while the rank's backend lives
    if (!capturing) return;
    for (int size : {1, 2, 4}) {
      r.records[rank] += backends[rank]->records[size];
      r.replays[rank] += backends[rank]->replays[size];
    }
  };
  std::thread worker([&] {
    try {
      engine::RankWorker w(options(1, &worker_comm));
      r.blocks[1] = w.kv_geometry().num_blocks;
      for (;;) {
        std::unique_lock lk(mu);
        cv.wait(lk, [&] { return !plans.empty(); });
        auto plan = std::move(plans.front());
        plans.pop_front();
        lk.unlock();
        if (!plan) return count(1);
        w.execute(*plan);
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "worker: %s\n", e.what());
      std::terminate();  // the head would wait at the barrier
    }
  });
  {
    engine::EngineOptions o = options(0, &head_comm);
    o.on_plan = [&](const engine::StepPlan& p) {
      std::lock_guard lk(mu);
      plans.emplace_back(p);
      cv.notify_one();
    };
    engine::Engine head(o);
    r.blocks[0] = head.stats().kv_blocks_total;
    r.out = test_engine::generate_greedy(head, prompts, 12);
    {
      std::lock_guard lk(mu);
      plans.emplace_back(std::nullopt);
      cv.notify_one();
    }
    worker.join();
    count(0);
  }
  return r;
}

}  // namespace

// The head pads a decode step to a graph size and the worker must run the same
// padded step (and capture it, collectives included) or their collectives
// differ in size; both size the same graphs from the same options.
TEST_CASE("tensor parallel: a head engine and a rank worker capturing their decode steps give the eager group's tokens") {
  const std::vector<std::vector<int32_t>> prompts = {{1, 504, 3458, 314, 260}, {1, 9690, 28}, {1, 30, 800, 31}};
  const GroupRun eager = run_head_and_worker(false, prompts);
  const GroupRun captured = run_head_and_worker(true, prompts);
  for (size_t p = 0; p < prompts.size(); ++p) CHECK_MESSAGE(captured.out[p].ids == eager.out[p].ids, "prompt ", p);
  MESSAGE("head: " << captured.records[0] << " recorded, " << captured.replays[0] << " replayed; worker: "
                   << captured.records[1] << " recorded, " << captured.replays[1] << " replayed");
  CHECK(captured.replays[0] > 0);
  CHECK(captured.records[1] == captured.records[0]);
  CHECK(captured.replays[1] == captured.replays[0]);
}

// Each rank sizes its cache by its own device (the worker's has less free) and
// the group takes the fewest blocks: the head's block tables address the same
// blocks on every rank.
TEST_CASE("tensor parallel: a head and a worker sized by their devices take the same, fewer, KV blocks") {
  const std::vector<std::vector<int32_t>> prompts = {{1, 504, 3458, 314, 260}};
  const GroupRun roomy = run_head_and_worker(true, prompts, {800, 800});
  const GroupRun tight = run_head_and_worker(true, prompts, {800, 400});
  MESSAGE("blocks: " << roomy.blocks[0] << " with 800 MiB free on both; " << tight.blocks[0] << " and "
                     << tight.blocks[1] << " with 400 MiB on the worker");
  CHECK(roomy.blocks[0] == roomy.blocks[1]);
  CHECK(tight.blocks[0] == tight.blocks[1]);
  CHECK(tight.blocks[0] < roomy.blocks[0]);
  CHECK(tight.out[0].ids == roomy.out[0].ids);
}

TEST_CASE("tensor parallel: a group larger than the kv heads is refused with the reason") {
  auto backend = kernels::make_cpu_backend(1);
  auto file = engine::GgufFile::open(test_paths::default_model());
  CHECK_THROWS_WITH_AS(engine::load_model(*file, *backend, engine::Precision::Fast, {}, engine::TensorParallel{0, 4}),
                       doctest::Contains("exceeds the model's 3 kv heads"), engine::LoadError);
}
