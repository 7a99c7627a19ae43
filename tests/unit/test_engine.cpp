// The engine on an injected backend. A "device-like" backend (memory not
// host-visible, every op checking that each pointer it is given lies in memory it
// allocated) must produce exactly the tokens of the plain CPU backend: weights,
// the KV cache, activations, step inputs and block tables all go through the
// backend's memory, as a GPU backend needs. A backend that captures steps
// (tests/unit/capturing_backend.hpp, the CUDA graphs' semantics on the CPU) must
// too, each graph size recorded once. Also what submit() refuses.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.hpp"
#include "engine/executor.hpp"
#include "engine/kv/gpu_kv_budget.hpp"
#include "engine/kv/kv_cache.hpp"
#include "faults/fault_points.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/host_memory.hpp"
#include "tests/engine_generate.hpp"
#include "tests/unit/capturing_backend.hpp"
#include "test_paths.hpp"

using namespace inferd;

namespace {

// The CPU backend's ops behind memory that only this backend hands out.
class DeviceLikeBackend final : public kernels::Backend {
 public:
  explicit DeviceLikeBackend(std::optional<kernels::DType> refused = std::nullopt)
      : cpu_(kernels::make_cpu_backend(1, kernels::CpuIsa::Auto)), refused_(refused) {}
  bool takes_weight_type(kernels::DType t) const override { return t != refused_; }

  std::string name() const override { return "device-like"; }
  int threads() const override { return cpu_->threads(); }
  bool host_visible() const override { return false; }
  kernels::Buffer alloc(size_t bytes, bool zeroed) override {
    void* p = kernels::host_alloc(bytes, zeroed);
    std::lock_guard lk(mu_);
    ranges_[static_cast<const char*>(p)] = bytes;
    allocated_ += bytes;
    in_use_ += bytes;
    return kernels::Buffer(this, p, bytes);
  }
  // With memory_total set, a device of that many bytes: free is what this
  // backend has not handed out. `in_use_at_query` keeps what was in use when asked.
  std::optional<kernels::MemoryInfo> memory_info() override {
    if (!memory_total) return std::nullopt;
    std::lock_guard lk(mu_);
    in_use_at_query = in_use_;
    return kernels::MemoryInfo{*memory_total - std::min(in_use_, *memory_total), *memory_total};
  }
  std::optional<size_t> memory_total;
  size_t in_use_at_query = 0;
  void upload(void* dst, const void* src, size_t n) override {
    check(dst, n, "upload");
    std::memcpy(dst, src, n);
    uploaded_ += n;
  }
  void download(void* dst, const void* src, size_t n) override {
    check(src, n, "download");
    std::memcpy(dst, src, n);
  }

  void get_rows(const kernels::WeightView& t, const int32_t* ids, int64_t n, float* out) override {
    check(t.data, t.rows * t.row_stride, "get_rows table");
    check(ids, n * 4, "get_rows ids");
    check(out, n * t.cols * 4, "get_rows out");
    cpu_->get_rows(t, ids, n, out);
  }
  void matmul(const kernels::WeightView& w, const float* x, int64_t n, float* y) override {
    check(w.data, w.rows * w.row_stride, "matmul weight");
    check(x, n * w.cols * 4, "matmul x");
    check(y, n * w.rows * 4, "matmul y");
    cpu_->matmul(w, x, n, y);
  }
  void rmsnorm(const float* x, const float* w, float* y, int64_t rows, int64_t n, float eps) override {
    check(x, rows * n * 4, "rmsnorm x");
    check(w, n * 4, "rmsnorm weight");
    check(y, rows * n * 4, "rmsnorm y");
    cpu_->rmsnorm(x, w, y, rows, n, eps);
  }
  void rope(float* x, const int32_t* pos, int64_t n, int heads, int hd, const kernels::RopeParams& p) override {
    check(x, n * heads * hd * 4, "rope x");
    check(pos, n * 4, "rope positions");
    cpu_->rope(x, pos, n, heads, hd, p);
  }
  void silu_mul(const float* g, const float* u, float* o, int64_t n) override {
    check(g, n * 4, "silu gate");
    check(u, n * 4, "silu up");
    check(o, n * 4, "silu out");
    cpu_->silu_mul(g, u, o, n);
  }
  void add(float* y, const float* x, int64_t n) override {
    check(y, n * 4, "add y");
    check(x, n * 4, "add x");
    cpu_->add(y, x, n);
  }
  void kv_store(const kernels::KvLayerView& kv, const kernels::AttnToken* t, int64_t n, const float* k,
                const float* v) override {
    check_tokens(kv, t, n);
    cpu_->kv_store(kv, t, n, k, v);
  }
  void attention(const kernels::KvLayerView& kv, const kernels::AttnToken* t, int64_t n, int64_t reach, const float* q,
                 int heads,
                 float scale, float* out) override {
    check_tokens(kv, t, n);
    check(q, n * heads * kv.head_dim * 4, "attention q");
    check(out, n * heads * kv.head_dim * 4, "attention out");
    cpu_->attention(kv, t, n, reach, q, heads, scale, out);
  }

  size_t allocated() const { return allocated_; }
  size_t uploaded() const { return uploaded_; }

 protected:
  void free(void* p) override {
    {
      std::lock_guard lk(mu_);
      if (auto it = ranges_.find(static_cast<const char*>(p)); it != ranges_.end()) {
        in_use_ -= it->second;
        ranges_.erase(it);
      }
    }
    kernels::host_free(p);
  }

 private:
  // Throws unless [p, p + bytes) lies inside one allocation.
  void check(const void* p, int64_t bytes, const char* what) const {
    const char* c = static_cast<const char*>(p);
    std::lock_guard lk(mu_);
    auto it = ranges_.upper_bound(c);
    if (it == ranges_.begin() || c + bytes > std::prev(it)->first + std::prev(it)->second)
      throw std::logic_error(std::string(what) + ": pointer outside the backend's memory");
  }
  void check_tokens(const kernels::KvLayerView& kv, const kernels::AttnToken* t, int64_t n) const {
    check(kv.k, 1, "kv k");
    check(kv.v, 1, "kv v");
    check(t, n * static_cast<int64_t>(sizeof(kernels::AttnToken)), "attention tokens");
    for (int64_t i = 0; i < n; ++i) check(t[i].block_table, (t[i].pos / kv.block_size + 1) * 4, "block table");
  }

  std::unique_ptr<kernels::Backend> cpu_;
  std::optional<kernels::DType> refused_;
  mutable std::mutex mu_;
  std::map<const char*, size_t> ranges_;
  size_t allocated_ = 0, uploaded_ = 0, in_use_ = 0;
};

engine::EngineOptions small_options() {
  engine::EngineOptions o;
  o.model_path = test_paths::default_model();
  o.threads = 1;
  o.max_model_len = 256;
  o.max_num_batched_tokens = 64;  // the prompts below are prefilled in chunks
  o.kv_cache_bytes = 16 << 20;
  return o;
}

std::vector<std::vector<int32_t>> test_prompts() {
  std::vector<std::vector<int32_t>> p;
  std::vector<int32_t> longer;
  for (int i = 0; i < 90; ++i) longer.push_back(100 + (i * 37) % 5000);
  p.push_back(longer);
  p.push_back({1, 504, 3303, 314, 260});
  p.push_back(std::vector<int32_t>(longer.begin(), longer.begin() + 40));  // shares a prefix with the first
  return p;
}

}  // namespace

TEST_CASE("engine on a device-like backend: same tokens as the CPU backend, every pointer in backend memory") {
  const auto prompts = test_prompts();
  std::vector<test_engine::Generated> want;
  {
    engine::Engine cpu(small_options());
    want = test_engine::generate_greedy(cpu, prompts, 12);
  }
  DeviceLikeBackend* dev = nullptr;
  auto o = small_options();
  o.backend = [&] {
    auto b = std::make_unique<DeviceLikeBackend>();
    dev = b.get();
    return b;
  };
  engine::Engine eng(o);
  REQUIRE(dev != nullptr);
  // The weights were copied in and the KV cache lives there.
  CHECK(dev->uploaded() > 90u << 20);
  CHECK(dev->allocated() > (16u << 20) + (90u << 20));
  const auto got = test_engine::generate_greedy(eng, prompts, 12);
  for (size_t p = 0; p < prompts.size(); ++p) {
    CHECK(got[p].ids == want[p].ids);
    CHECK(got[p].ids.size() == 12);
  }
}

TEST_CASE("engine: gpu_memory_utilization sizes the KV cache by the device's memory once the weights are on it") {
  DeviceLikeBackend* dev = nullptr;
  auto o = small_options();
  o.gpu_memory_utilization = 0.5;
  const size_t total = size_t(1) << 30;  // a 1 GiB device: 512 MiB allowed
  o.backend = [&] {
    auto b = std::make_unique<DeviceLikeBackend>();
    b->memory_total = total;
    dev = b.get();
    return b;
  };
  {
    engine::Engine eng(o);
    REQUIRE(dev != nullptr);
    const auto& mc = eng.model_config();
    engine::KvGeometry g;
    g.n_layers = mc.n_layers;
    g.n_kv_heads = mc.kv_heads_here;
    g.head_dim = mc.head_dim;
    g.block_size = o.block_size;
    const size_t per_block = g.bytes_per_block_layer() * 2 * size_t(mc.n_layers);
    const size_t scratch = engine::step_scratch_bound(mc, o.max_num_batched_tokens, o.max_num_seqs);
    const size_t weights = dev->in_use_at_query, kv = size_t(eng.stats().kv_blocks_total) * per_block;
    CHECK(weights > 90u << 20);  // asked once the weights were uploaded
    // As many blocks as fit in half the device beside the weights and a step's buffers: not the 16 MiB asked.
    CHECK(weights + scratch + kv <= total / 2);
    CHECK(weights + scratch + kv + per_block > total / 2);
    CHECK(kv > 16u << 20);
    // It serves.
    const auto got = test_engine::generate_greedy(eng, {{1, 504, 3303}}, 4);
    CHECK(got[0].ids.size() == 4);
  }
  // Weights past the share: refused, naming the sizes and the flag.
  o.gpu_memory_utilization = 0.05;
  CHECK_THROWS_WITH_AS(engine::Engine{o},
                       doctest::Contains("--gpu-memory-utilization 0.05 allows 0.05 GiB of the device's 1.00 GiB"),
                       std::invalid_argument);
  // A backend that does not report its memory (the CPU) keeps kv_cache_bytes.
  o.backend = {};
  engine::Engine cpu(o);
  CHECK(cpu.stats().kv_blocks_total < 64);
}

TEST_CASE("engine: a weight type the backend does not take is refused at load, naming the tensor and file") {
  auto o = small_options();
  o.backend = [] { return std::make_unique<DeviceLikeBackend>(kernels::DType::Q4_1); };
  std::string what;
  try {
    engine::Engine eng(o);
  } catch (const std::exception& e) {
    what = e.what();
  }
  CHECK(what.find(test_paths::default_model()) != std::string::npos);
  CHECK_MESSAGE(what.find("is q4_1, which the device-like backend does not take") != std::string::npos, what);
}

TEST_CASE("engine: max_tokens near INT32_MAX is refused, not overflowed") {
  engine::Engine eng(small_options());
  engine::GenerationRequest r;
  r.prompt = {1, 2, 3};
  r.max_tokens = std::numeric_limits<int32_t>::max();
  r.sink = [](engine::Delta&&) {};
  try {
    eng.submit(std::move(r));
    FAIL("accepted");
  } catch (const engine::InvalidRequest& e) {
    CHECK(e.field == "max_tokens");
  }
}

TEST_CASE("engine: a finished request is no longer counted as running when its answer leaves") {
  // A client that reads the gauges after its answer must not see itself running
  // (a drain timed by them would stop before the next request was sent).
  engine::Engine eng(small_options());
  std::mutex mu;
  std::condition_variable cv;
  std::optional<int> running_at_finish;
  engine::GenerationRequest r;
  r.prompt = {1, 30, 800};
  r.max_tokens = 1;
  r.sink = [&](engine::Delta&& d) {
    if (d.finish == engine::FinishReason::None) return;
    std::lock_guard lk(mu);
    running_at_finish = eng.stats().running;
    cv.notify_all();
  };
  eng.submit(std::move(r));
  std::unique_lock lk(mu);
  test_engine::wait_finished(eng, lk, cv, [&] { return running_at_finish.has_value(); });
  CHECK(*running_at_finish == 0);
}

TEST_CASE("engine: max_model_len past the trained context, or a KV cache too small for it, is refused") {
  auto o = small_options();
  o.max_model_len = 8193;  // SmolLM2 is trained for 8192
  CHECK_THROWS_WITH_AS(engine::Engine{o}, doctest::Contains("exceeds the model's trained context of 8192"),
                       std::invalid_argument);
  o = small_options();
  o.max_model_len = 8192;
  o.kv_cache_bytes = 16 << 20;  // 45 blocks of 16 tokens
  CHECK_THROWS_WITH_AS(engine::Engine{o}, doctest::Contains("raise kv_cache_bytes to at least 181 MiB"),
                       std::invalid_argument);
}

#if INFERD_FAULTS
// A generation that outlives its bound fails the test, and only that: the engine
// is stopped before the frame its request's sink writes to goes away (the
// engine's thread used to block on the freed mutex, hanging the program).
TEST_CASE("engine tests: a generation past its bound stops the engine, then fails" * doctest::should_fail()) {
  engine::Engine eng(small_options());
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  engine::GenerationRequest r;
  r.prompt = {1, 30, 800};
  r.max_tokens = 4;
  r.sink = [&](engine::Delta&& d) {
    std::lock_guard lk(mu);
    done |= d.finish != engine::FinishReason::None;
    cv.notify_all();
  };
  faults::arm_fault("step.stall");  // the step hangs until the engine stops
  eng.submit(std::move(r));
  std::unique_lock lk(mu);
  test_engine::wait_finished(eng, lk, cv, [&] { return done; }, std::chrono::milliseconds(200));
}
#endif

TEST_CASE("engine: a reset's re-forming of the group has its own bounds; its failure is the reset's answer") {
  using namespace std::chrono_literals;
  auto o = small_options();
  std::atomic<int> reforms{0};
  std::atomic<bool> slow_next{true}, fail_next{false};
  o.reform_group = [&](const std::string&) {
    ++reforms;
    if (slow_next.exchange(false)) std::this_thread::sleep_for(2500ms);  // waiting for a restarted rank to rejoin
    if (fail_next.exchange(false)) throw std::runtime_error("worker rank 1 not joined within 60 s");
  };
  engine::Engine eng(o);
  // The idle engine leaves its (absent) step at once; re-forming takes longer
  // than the reset's timeout, and the reset still succeeds.
  CHECK(eng.reset("test", 2s) == std::nullopt);
  fail_next = true;
  const auto why = eng.reset("test", 2s);
  REQUIRE(why.has_value());
  CHECK(*why == "the tensor-parallel group did not re-form: worker rank 1 not joined within 60 s");
  CHECK(eng.reset("test", 2s) == std::nullopt);  // the next reset re-forms it
  CHECK(reforms == 3);
}

TEST_CASE("engine: a request a reset ends is told outside the engine's lock, so its sink may submit") {
  // A client holding its own lock while it submits (the daemon's Generation
  // does) and taking that lock in its sink deadlocks if a reset's sink runs
  // under the engine's lock (ThreadSanitizer found the inversion). Here the
  // sink of the request the reset interrupts submits a new one itself: under
  // the engine's lock, that would lock it twice.
  using namespace std::chrono_literals;
  engine::Engine eng(small_options());
  std::mutex mu;
  std::condition_variable cv;
  bool first_token = false, reset_asked = false, resubmitted_done = false;
  std::string interrupted_error;
  engine::GenerationRequest again;
  again.prompt = {1, 504, 3303};
  again.max_tokens = 2;
  again.sink = [&](engine::Delta&& d) {
    if (d.finish == engine::FinishReason::None) return;
    std::lock_guard lk(mu);
    resubmitted_done = true;
    cv.notify_all();
  };
  engine::GenerationRequest r;
  r.prompt = {1, 30, 800};
  r.max_tokens = 200;
  r.ignore_eos = true;
  r.sink = [&](engine::Delta&& d) {
    if (d.finish == engine::FinishReason::None) {
      std::unique_lock lk(mu);
      if (first_token) return;
      first_token = true;  // hold the step until the reset is asked for, so it interrupts this request
      cv.notify_all();
      cv.wait_for(lk, 60s, [&] { return reset_asked; });
      return;
    }
    {
      std::lock_guard lk(mu);
      interrupted_error = d.error;
    }
    eng.submit(std::move(again));
  };
  eng.submit(std::move(r));
  {
    std::unique_lock lk(mu);
    REQUIRE(cv.wait_for(lk, 60s, [&] { return first_token; }));
    reset_asked = true;
    cv.notify_all();
  }
  std::optional<std::string> reset_failure = "not returned";
  std::thread resetter([&] { reset_failure = eng.reset("test", 60s); });
  {
    std::unique_lock lk(mu);
    if (!cv.wait_for(lk, 120s, [&] { return resubmitted_done; })) {
      // The engine's thread (and the reset waiting on it) is stuck for good:
      // nothing could stop or join it, so end here rather than hang.
      std::fprintf(stderr, "the sink's submit did not return: the engine called it under its own lock\n");
      std::_Exit(3);
    }
    CHECK(interrupted_error.find("interrupted by a recovery (test)") != std::string::npos);
  }
  resetter.join();
  CHECK(reset_failure == std::nullopt);
}

TEST_CASE("engine on a backend that captures steps: decode steps padded to graph sizes, each recorded once") {
  // Five prompts decode together (padded to 8), then fewer as the shorter ones end.
  auto prompts = test_prompts();
  prompts.push_back({1, 30, 800});
  prompts.push_back({1, 31, 807, 12});
  std::vector<test_engine::Generated> want;
  {
    engine::Engine cpu(small_options());
    CHECK(cpu.graph_sizes().empty());  // the CPU backend captures nothing, whatever the options say
    want = test_engine::generate_greedy(cpu, prompts, 14);
  }
  test_capture::CapturingBackend* cap = nullptr;
  auto o = small_options();
  o.backend = [&] {
    auto b = std::make_unique<test_capture::CapturingBackend>();
    cap = b.get();
    return b;
  };
  engine::Engine eng(o);
  CHECK(eng.graph_sizes() == std::vector<int>{1, 2, 4, 8});
  const auto got = test_engine::generate_greedy(eng, prompts, 14);
  for (size_t p = 0; p < prompts.size(); ++p) CHECK(got[p].ids == want[p].ids);
  // Every decode step ran captured: each size recorded once, at its first step,
  // and replayed after at every later position (the contexts cross block bounds).
  REQUIRE(cap != nullptr);
  CHECK(cap->records.count(8) == 1);
  for (const auto& record : cap->records) {
    const auto& [size, n] = record;
    CAPTURE(record.first);
    CHECK(n == 1);
  }
  CHECK(cap->replays[8] >= 5);
}

TEST_CASE("executor: a decode step runs as the smallest graph size that holds it; none beyond the largest") {
  test_capture::CapturingBackend cap;
  auto cpu = kernels::make_cpu_backend(1, kernels::CpuIsa::Auto);
  CHECK(engine::graph_sizes_for(*cpu, {1, 2, 4, 8}, 64, 2048).empty());
  CHECK(engine::graph_sizes_for(cap, {8, 1, 4, 4, 0, 2}, 64, 2048) == std::vector<int>{1, 2, 4, 8});
  // A padded step must fit a step: sizes beyond max_num_seqs or the token budget are dropped.
  CHECK(engine::graph_sizes_for(cap, {1, 2, 4, 8}, 3, 2048) == std::vector<int>{1, 2});
  CHECK(engine::graph_sizes_for(cap, {1, 2, 4, 8}, 64, 4) == std::vector<int>{1, 2, 4});
  CHECK(engine::graph_size_of({1, 3, 6}, 1) == 1);
  CHECK(engine::graph_size_of({1, 3, 6}, 2) == 3);
  CHECK(engine::graph_size_of({1, 3, 6}, 6) == 6);
  CHECK(engine::graph_size_of({1, 3, 6}, 7) == 0);
  CHECK(engine::graph_size_of({}, 1) == 0);
}
