// A persistent pool of worker threads for data-parallel kernels. Dispatch is a
// generation counter the workers spin on for a short while before sleeping on a
// futex, so back-to-back launches (hundreds per decoded token) cost microseconds.
// A worker joins a job only while it is open; once every task is taken the
// caller closes it and waits just for the workers that joined, so a worker the
// OS has not scheduled (a busy machine) never delays the caller.
#pragma once
#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

#include "kernels/cancelled.hpp"

namespace inferd::kernels {

class ThreadPool {
 public:
  // n_threads counts the calling thread; <= 0 means one per online core.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Once *flag is true, no further task starts: parallel_for waits only for the
  // tasks already running (so nothing still uses its caller's frame) and throws
  // Cancelled. A task that never returns cannot be cancelled.
  void set_cancel_flag(const std::atomic<bool>* flag) { cancel_ = flag; }

  // Runs fn(task, thread) for every task in [0, n_tasks), handing tasks out one
  // at a time to the caller (thread 0) and the workers (1..size()-1); returns when
  // all are done. Calls from several threads are serialized; fn must not call
  // parallel_for itself.
  template <class Fn>
  void parallel_for(int64_t n_tasks, Fn&& fn) {
    if (n_tasks <= 0) return;
    if (n_tasks == 1 || n_threads_ == 1) {
      for (int64_t t = 0; t < n_tasks; ++t) {
        if (cancel_requested(cancel_)) throw Cancelled();
        fn(t, 0);
      }
      return;
    }
    using F = std::remove_reference_t<Fn>;
    run(n_tasks, [](void* ctx, int64_t task, int thread) { (*static_cast<F*>(ctx))(task, thread); },
        const_cast<void*>(static_cast<const void*>(&fn)));
  }

 private:
  using TaskFn = void (*)(void* ctx, int64_t task, int thread);
  void run(int64_t n_tasks, TaskFn fn, void* ctx);
  void work(int thread);
  void drain(int thread);
  bool try_join();

  const int n_threads_;
  const std::atomic<bool>* cancel_ = nullptr;
  std::vector<std::thread> workers_;
  std::mutex dispatch_mu_;  // one job at a time

  // The job: written by the dispatcher before it bumps generation_.
  TaskFn fn_ = nullptr;
  void* ctx_ = nullptr;
  int64_t n_tasks_ = 0;
  std::atomic<bool> stop_{false};

  alignas(64) std::atomic<uint32_t> generation_{0};  // futex word the workers wait on
  std::atomic<int> sleepers_{0};
  alignas(64) std::atomic<int64_t> next_task_{0};
  // kClosed | number of workers inside the job; futex word the caller waits on.
  alignas(64) std::atomic<uint32_t> state_{kClosed};
  std::atomic<bool> caller_sleeping_{false};
  static constexpr uint32_t kClosed = 1u << 31;
};

}  // namespace inferd::kernels
