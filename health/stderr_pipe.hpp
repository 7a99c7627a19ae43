// The daemon's own stderr as a pipe it reads: every line the process or its
// children write to fd 2 is passed through to the original stderr unchanged and
// handed to a callback (e.g. LogScanner::scan). A reader thread does the
// pass-through and never waits on the callback, which runs on a second thread
// behind a bounded queue: a slow callback drops lines, never blocks writers.
// In a sanitizer build the runtime's reports bypass the pipe: they go straight
// to the original stderr, since the process exits right after one.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

namespace inferd::health {

struct StderrPipeOptions {
  std::size_t max_line = 4096;      // longer lines reach the callback in pieces
  std::size_t queue_lines = 4096;   // lines waiting for the callback before dropping
};

class StderrPipe {
 public:
  // Called per line without its newline. It must not write a line to stderr for
  // every line it gets: it would see its own output.
  using LineCallback = std::function<void(std::string_view line)>;

  // Replaces fd 2 with the pipe (children inherit it) and starts the threads.
  // Throws std::system_error when a descriptor cannot be made.
  static std::unique_ptr<StderrPipe> install(LineCallback callback, StderrPipeOptions options = {});
  // Uninstalls.
  ~StderrPipe();
  StderrPipe(const StderrPipe&) = delete;
  StderrPipe& operator=(const StderrPipe&) = delete;

  // Restores fd 2, drains what was already written (a partial last line is
  // delivered too), runs the callback on every queued line and joins the
  // threads. Idempotent; from the thread that owns the pipe. A child still
  // holding the pipe does not delay it.
  void uninstall();

  // The original stderr (a dup), valid until uninstall().
  int original_fd() const { return original_fd_; }
  // Lines the callback never saw because the queue was full.
  uint64_t dropped_lines() const { return dropped_.load(std::memory_order_relaxed); }

 private:
  StderrPipe(LineCallback callback, StderrPipeOptions options);
  void read_loop();
  void callback_loop();
  void split(std::string_view data);
  void enqueue(std::string line);

  LineCallback callback_;
  StderrPipeOptions options_;
  int original_fd_ = -1;
  int read_fd_ = -1;
  int stop_fd_ = -1;  // an eventfd: wakes the reader for uninstall()
  std::string partial_;  // reader thread only
  std::atomic<uint64_t> dropped_{0};

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;
  bool reader_done_ = false;

  std::thread reader_, caller_;
  bool installed_ = false;
};

}  // namespace inferd::health
