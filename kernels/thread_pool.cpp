#include "kernels/thread_pool.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <climits>

namespace inferd::kernels {
namespace {

void futex_wait(std::atomic<uint32_t>& word, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT_PRIVATE, expected, nullptr, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>& word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// How long a thread spins for a change before sleeping: long enough to bridge
// the gap between the kernels of one decode step, short enough not to burn a
// core while the server is idle.
constexpr auto kSpin = std::chrono::microseconds(300);

// Spins until word != value or the spin budget is spent; true when it changed.
bool spin_while_equal(const std::atomic<uint32_t>& word, uint32_t value) {
  const auto deadline = std::chrono::steady_clock::now() + kSpin;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (word.load(std::memory_order_acquire) != value) return true;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() > deadline) return false;
  }
}

}  // namespace

ThreadPool::ThreadPool(int n_threads)
    : n_threads_(n_threads > 0 ? n_threads : std::max(1u, std::thread::hardware_concurrency())) {
  workers_.reserve(n_threads_ - 1);
  for (int t = 1; t < n_threads_; ++t) workers_.emplace_back([this, t] { work(t); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(dispatch_mu_);
    stop_ = true;
    generation_.fetch_add(1);
    futex_wake_all(generation_);
  }
  for (auto& w : workers_) w.join();
}

void ThreadPool::drain(int thread) {
  for (;;) {
    if (cancel_requested(cancel_)) return;
    const int64_t task = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (task >= n_tasks_) return;
    fn_(ctx_, task, thread);
  }
}

void ThreadPool::run(int64_t n_tasks, TaskFn fn, void* ctx) {
  std::lock_guard lock(dispatch_mu_);
  fn_ = fn;
  ctx_ = ctx;
  n_tasks_ = n_tasks;
  next_task_.store(0, std::memory_order_relaxed);
  state_.store(0, std::memory_order_release);  // open, nobody inside: publishes the job
  // seq_cst pairs with the sleeper's increment: either we see it, or its futex
  // wait sees the new generation and returns at once.
  generation_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) futex_wake_all(generation_);

  drain(0);

  uint32_t s = state_.fetch_or(kClosed, std::memory_order_acq_rel) | kClosed;
  while (s != kClosed) {
    if (!spin_while_equal(state_, s)) {
      caller_sleeping_.store(true, std::memory_order_seq_cst);
      if (state_.load(std::memory_order_seq_cst) == s) futex_wait(state_, s);
      caller_sleeping_.store(false, std::memory_order_relaxed);
    }
    s = state_.load(std::memory_order_acquire);
  }
  if (cancel_requested(cancel_)) throw Cancelled();
}

bool ThreadPool::try_join() {
  uint32_t s = state_.load(std::memory_order_relaxed);
  while (!(s & kClosed))
    if (state_.compare_exchange_weak(s, s + 1, std::memory_order_acquire, std::memory_order_relaxed)) return true;
  return false;
}

void ThreadPool::work(int thread) {
  uint32_t seen = 0;
  for (;;) {
    while (generation_.load(std::memory_order_acquire) == seen) {
      if (spin_while_equal(generation_, seen)) break;
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      futex_wait(generation_, seen);
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
    }
    seen = generation_.load(std::memory_order_acquire);
    if (stop_) return;
    // A late worker finds the job closed (or joins the next one, which is
    // published before it opens): either way it only runs tasks of an open job.
    if (!try_join()) continue;
    drain(thread);
    // seq_cst pairs with the caller's flag: either we see it asleep, or its
    // futex wait sees the changed state.
    state_.fetch_sub(1, std::memory_order_seq_cst);
    if (caller_sleeping_.load(std::memory_order_seq_cst)) futex_wake_all(state_);
  }
}

}  // namespace inferd::kernels
