// Counts the time a rank spends inside collectives, waiting for its peers
// included: what tensor parallelism costs a step, for /metrics and benchmarks.
#pragma once
#include <atomic>
#include <chrono>
#include <memory>

#include "comm/collectives.hpp"

namespace inferd::comm {

class TimedCollectives final : public Collectives {
 public:
  explicit TimedCollectives(std::unique_ptr<Collectives> inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  void all_reduce_sum(float* data, size_t n) override {
    timed([&] { inner_->all_reduce_sum(data, n); });
  }
  void all_gather(const float* in, size_t n, float* out) override {
    timed([&] { inner_->all_gather(in, n, out); });
  }
  void broadcast(void* data, size_t bytes, int root) override {
    timed([&] { inner_->broadcast(data, bytes, root); });
  }
  void barrier() override {
    timed([&] { inner_->barrier(); });
  }
  void abort(const std::string& why) override { inner_->abort(why); }
  void reinit(int generation) override { inner_->reinit(generation); }
  int generation() const override { return inner_->generation(); }
  // Ops queued on a device run there later, with no host thread waiting in
  // them: not counted. On the host (a null queue) they run now and count.
  void queue_all_reduce_sum(float* data, size_t n, void* queue) override {
    if (queue) return inner_->queue_all_reduce_sum(data, n, queue);
    timed([&] { inner_->queue_all_reduce_sum(data, n, queue); });
  }
  void queue_all_gather(const float* in, size_t n, float* out, void* queue) override {
    if (queue) return inner_->queue_all_gather(in, n, out, queue);
    timed([&] { inner_->queue_all_gather(in, n, out, queue); });
  }
  void settle() override { inner_->settle(); }

  double seconds() const { return static_cast<double>(ns_.load(std::memory_order_relaxed)) * 1e-9; }
  uint64_t calls() const { return calls_.load(std::memory_order_relaxed); }

 private:
  template <class F>
  void timed(F&& op) {
    const auto start = std::chrono::steady_clock::now();
    struct Count {
      TimedCollectives& self;
      std::chrono::steady_clock::time_point start;
      ~Count() {
        const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start);
        self.ns_.fetch_add(static_cast<uint64_t>(ns.count()), std::memory_order_relaxed);
        self.calls_.fetch_add(1, std::memory_order_relaxed);
      }
    } count{*this, start};
    op();
  }

  std::unique_ptr<Collectives> inner_;
  std::atomic<uint64_t> ns_{0}, calls_{0};
};

}  // namespace inferd::comm
