// A CPU stand-in for a backend that captures steps (the CUDA backend's graphs),
// so the engine's side of run_captured() is tested on any machine: memory that is
// not host-visible, and captured steps done the way the CUDA backend does them.
// The first call of a key records every op (a closure over its arguments) while
// running it. A later call runs the step with every op skipped but compared with
// the recording, its uploads done at once and its downloads held back; then the
// recording runs, then the downloads. Where the step would launch anything else,
// it is recorded anew. As a kernel reads positions from device memory, a recorded
// attention takes its reach from the tokens in memory when it runs, not from the
// step that was recorded.
#pragma once
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/host_memory.hpp"
#include "kernels/launch_keys.hpp"

namespace test_capture {

namespace kernels = inferd::kernels;

class CapturingBackend final : public kernels::Backend {
 public:
  CapturingBackend() : cpu_(kernels::make_cpu_backend(1, kernels::CpuIsa::Auto)) {}
  ~CapturingBackend() override {
    for (auto& [key, g] : graphs_) drop(g);
  }

  std::string name() const override { return "capturing"; }
  int threads() const override { return cpu_->threads(); }
  bool host_visible() const override { return false; }
  kernels::Buffer alloc(size_t bytes, bool zeroed) override {
    return kernels::Buffer(this, kernels::host_alloc(bytes, zeroed), bytes);
  }
  void upload(void* dst, const void* src, size_t n) override {
    note({tag("upload"), word(dst)});
    std::memcpy(dst, src, n);
  }
  void download(void* dst, const void* src, size_t n) override {
    note({tag("download"), word(src), n});
    if (mode_ == Mode::Replay) held_.push_back([=] { std::memcpy(dst, src, n); });
    else std::memcpy(dst, src, n);
  }

  void get_rows(const kernels::WeightView& t, const int32_t* ids, int64_t n, float* out) override {
    op({tag("get_rows"), word(t.data), word(ids), word(n), word(out)}, [=, this] { cpu_->get_rows(t, ids, n, out); });
  }
  void matmul(const kernels::WeightView& w, const float* x, int64_t n, float* y) override {
    op({tag("matmul"), word(w.data), word(x), word(n), word(y)}, [=, this] { cpu_->matmul(w, x, n, y); });
  }
  void rmsnorm(const float* x, const float* w, float* y, int64_t rows, int64_t n, float eps) override {
    op({tag("rmsnorm"), word(x), word(w), word(y), word(rows), word(n)},
       [=, this] { cpu_->rmsnorm(x, w, y, rows, n, eps); });
  }
  void rope(float* x, const int32_t* pos, int64_t n, int heads, int hd, const kernels::RopeParams& p) override {
    op({tag("rope"), word(x), word(pos), word(n), word(heads)}, [=, this] { cpu_->rope(x, pos, n, heads, hd, p); });
  }
  void silu_mul(const float* g, const float* u, float* o, int64_t n) override {
    op({tag("silu_mul"), word(g), word(u), word(o), word(n)}, [=, this] { cpu_->silu_mul(g, u, o, n); });
  }
  void add(float* y, const float* x, int64_t n) override {
    op({tag("add"), word(y), word(x), word(n)}, [=, this] { cpu_->add(y, x, n); });
  }
  void kv_store(const kernels::KvLayerView& kv, const kernels::AttnToken* t, int64_t n, const float* k,
                const float* v) override {
    op({tag("kv_store"), word(kv.k), word(t), word(n), word(k), word(v)}, [=, this] { cpu_->kv_store(kv, t, n, k, v); });
  }
  void attention(const kernels::KvLayerView& kv, const kernels::AttnToken* t, int64_t n, int64_t reach,
                 const float* q, int heads, float scale, float* out) override {
    if (mode_ == Mode::Eager) return cpu_->attention(kv, t, n, reach, q, heads, scale, out);
    op({tag("attention"), word(kv.k), word(t), word(n), word(q), word(heads), word(out)}, [=, this] {
      cpu_->attention(kv, t, n, kernels::launch_keys::attention_reach(t, n), q, heads, scale, out);
    });
  }

  void copy_rows(const float* src, int64_t ss, float* dst, int64_t ds, int64_t rows, int64_t cols) override {
    op({tag("copy_rows"), word(src), word(ss), word(dst), word(ds), word(rows), word(cols)},
       [=, this] { cpu_->copy_rows(src, ss, dst, ds, rows, cols); });
  }
  // Recorded like an op: a replay calls `launch` again (a device graph replays what it queued).
  void queue_external(const char* what, std::span<const uint64_t> args,
                      const std::function<void(void*)>& launch) override {
    std::vector<uint64_t> words{tag("external"), tag(what)};
    words.insert(words.end(), args.begin(), args.end());
    op(words, [launch] { launch(nullptr); });
  }

  // With `memory` set, a device of that much memory (what it reports only).
  std::optional<kernels::MemoryInfo> memory;
  std::optional<kernels::MemoryInfo> memory_info() override { return memory; }

  bool can_capture() const override { return true; }
  void run_captured(int64_t key, const std::function<void()>& step) override {
    Graph& g = graphs_[key];
    if (g.recorded) {
      kernels::LaunchScope scope(kernels::launch_keys::graph_replay(key));
      held_.clear();
      {
        Scoped replay(*this, Mode::Replay, &g);
        step();
      }
      if (!mismatch_ && cursor_ == g.signature.size()) {
        for (auto& f : g.ops) f();
        for (auto& f : held_) f();
        ++replays[key];
        return;
      }
      drop(g);
    }
    {
      kernels::LaunchScope scope(kernels::launch_keys::graph_capture(key));
      Scoped record(*this, Mode::Record, &g);
      step();
    }
    g.recorded = true;
    ++records[key];
  }

  // Per key: how often a step was recorded, and replayed.
  std::map<int64_t, int> records, replays;

 protected:
  void free(void* p) override {
    if (mode_ == Mode::Record) graph_->keep.push_back(p);  // the recording may still use it
    else kernels::host_free(p);
  }

 private:
  enum class Mode { Eager, Record, Replay };
  struct Graph {
    bool recorded = false;
    std::vector<uint64_t> signature;
    std::vector<std::function<void()>> ops;
    std::vector<void*> keep;
  };
  class Scoped {
   public:
    Scoped(CapturingBackend& be, Mode m, Graph* g) : be_(be) {
      be_.mode_ = m;
      be_.graph_ = g;
      be_.cursor_ = 0;
      be_.mismatch_ = false;
      if (m == Mode::Record) g->signature.clear(), g->ops.clear();
    }
    ~Scoped() { be_.mode_ = Mode::Eager; }

   private:
    CapturingBackend& be_;
  };

  static uint64_t word(const void* p) { return reinterpret_cast<uintptr_t>(p); }
  static uint64_t word(int64_t v) { return static_cast<uint64_t>(v); }
  static uint64_t tag(const char* s) { return word(static_cast<const void*>(s)); }

  // Records or checks an op's signature words; true when the op is to run now.
  bool note(std::span<const uint64_t> words) {
    if (mode_ == Mode::Eager) return true;
    if (mode_ == Mode::Record) {
      graph_->signature.insert(graph_->signature.end(), words.begin(), words.end());
      return true;
    }
    const auto& want = graph_->signature;
    if (mismatch_ || cursor_ + words.size() > want.size() ||
        !std::equal(words.begin(), words.end(), want.begin() + cursor_))
      mismatch_ = true;
    else
      cursor_ += words.size();
    return false;
  }
  bool note(std::initializer_list<uint64_t> words) { return note(std::span(words.begin(), words.size())); }
  void op(std::initializer_list<uint64_t> words, std::function<void()> f) {
    op(std::span(words.begin(), words.size()), std::move(f));
  }
  void op(std::span<const uint64_t> words, std::function<void()> f) {
    if (!note(words)) return;
    if (mode_ == Mode::Record) graph_->ops.push_back(f);
    f();
  }
  void drop(Graph& g) {
    for (void* p : g.keep) kernels::host_free(p);
    g = Graph{};
  }

  std::unique_ptr<kernels::Backend> cpu_;
  std::map<int64_t, Graph> graphs_;
  Mode mode_ = Mode::Eager;
  Graph* graph_ = nullptr;
  size_t cursor_ = 0;
  bool mismatch_ = false;
  std::vector<std::function<void()>> held_;
};

}  // namespace test_capture
