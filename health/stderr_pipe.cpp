#include "health/stderr_pipe.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <system_error>
#include <utility>

// The sanitizer runtimes' report descriptor (a null address outside a
// -Db_sanitize build). A report is followed at once by the process's exit: sent
// through the pipe, its end would die unread with the reader thread.
extern "C" void __sanitizer_set_report_fd(void* fd) __attribute__((weak));

namespace inferd::health {

namespace {

void set_sanitizer_report_fd(int fd) {
  if (__sanitizer_set_report_fd) __sanitizer_set_report_fd(reinterpret_cast<void*>(static_cast<intptr_t>(fd)));
}

[[noreturn]] void throw_errno(const char* what) { throw std::system_error(errno, std::generic_category(), what); }

constexpr std::size_t kMaxDrain = 1 << 20;

// Best effort: a broken original stderr must not stop the pass-through loop.
void write_all(int fd, const char* data, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    data += w;
    n -= static_cast<std::size_t>(w);
  }
}

}  // namespace

StderrPipe::StderrPipe(LineCallback callback, StderrPipeOptions options)
    : callback_(std::move(callback)), options_(options) {
  if (options_.max_line == 0) options_.max_line = 1;
}

std::unique_ptr<StderrPipe> StderrPipe::install(LineCallback callback, StderrPipeOptions options) {
  std::unique_ptr<StderrPipe> p(new StderrPipe(std::move(callback), options));
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw_errno("stderr pipe: pipe2");
  p->read_fd_ = fds[0];
  auto fail = [&](const char* what) {
    const int err = errno;
    ::close(fds[1]);
    errno = err;
    throw_errno(what);  // the destructor closes what p holds
  };
  if (::fcntl(p->read_fd_, F_SETFL, O_NONBLOCK) != 0) fail("stderr pipe: fcntl");
  p->original_fd_ = ::fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
  if (p->original_fd_ < 0) fail("stderr pipe: dup stderr");
  p->stop_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (p->stop_fd_ < 0) fail("stderr pipe: eventfd");
  // dup2 clears close-on-exec: children inherit the pipe as their stderr.
  if (::dup2(fds[1], STDERR_FILENO) < 0) fail("stderr pipe: dup2");
  ::close(fds[1]);
  set_sanitizer_report_fd(p->original_fd_);
  p->installed_ = true;
  p->reader_ = std::thread([raw = p.get()] { raw->read_loop(); });
  p->caller_ = std::thread([raw = p.get()] { raw->callback_loop(); });
  return p;
}

StderrPipe::~StderrPipe() {
  uninstall();
  for (int fd : {read_fd_, stop_fd_, original_fd_})
    if (fd >= 0) ::close(fd);
}

void StderrPipe::uninstall() {
  if (!installed_) return;
  installed_ = false;
  ::dup2(original_fd_, STDERR_FILENO);
  set_sanitizer_report_fd(STDERR_FILENO);
  const uint64_t one = 1;
  (void)!::write(stop_fd_, &one, sizeof one);  // cannot fail short of overflow
  if (reader_.joinable()) reader_.join();
  if (caller_.joinable()) caller_.join();
}

void StderrPipe::read_loop() {
  // A closed original stderr must give EPIPE here, not kill the process.
  sigset_t pipe_only;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_only, nullptr);

  char buf[16384];
  bool stopping = false, eof = false;
  std::size_t drained = 0;
  while (!stopping) {
    // After EOF (someone closed fd 2) the pipe would poll readable forever.
    pollfd fds[2] = {{eof ? -1 : read_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0 && errno != EINTR) break;
    stopping = fds[1].revents & POLLIN;
    // Read until the pipe is empty; on stop that drains what was written before,
    // bounded so a child that keeps writing cannot hold uninstall() up.
    while (!eof && (!stopping || drained < kMaxDrain)) {
      const ssize_t n = ::read(read_fd_, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) break;  // EAGAIN: empty for now
      if (n == 0) {
        eof = true;  // every writer closed it
        break;
      }
      write_all(original_fd_, buf, static_cast<std::size_t>(n));
      split(std::string_view(buf, static_cast<std::size_t>(n)));
      if (stopping) drained += static_cast<std::size_t>(n);
    }
  }
  if (!partial_.empty()) enqueue(std::exchange(partial_, {}));
  std::lock_guard lock(mu_);
  reader_done_ = true;
  cv_.notify_one();
}

// Lines end at '\n'; a line longer than max_line goes out in max_line pieces.
void StderrPipe::split(std::string_view data) {
  while (!data.empty()) {
    const std::size_t room = options_.max_line - partial_.size();
    const std::size_t nl = data.substr(0, room + 1).find('\n');
    if (nl != std::string_view::npos) {
      partial_.append(data.substr(0, nl));
      data.remove_prefix(nl + 1);
    } else if (data.size() > room) {
      partial_.append(data.substr(0, room));
      data.remove_prefix(room);
    } else {
      partial_.append(data);
      return;
    }
    enqueue(std::exchange(partial_, {}));
  }
}

void StderrPipe::enqueue(std::string line) {
  std::lock_guard lock(mu_);
  if (queue_.size() >= options_.queue_lines) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  queue_.push_back(std::move(line));
  cv_.notify_one();
}

void StderrPipe::callback_loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return !queue_.empty() || reader_done_; });
    if (queue_.empty()) return;  // reader done and everything delivered
    std::string line = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    try {
      callback_(line);
    } catch (...) {
      // A failing callback must not take the process's stderr down with it.
    }
    lock.lock();
  }
}

}  // namespace inferd::health
