// The stderr pipe replaces the test binary's own fd 2, so each test first points
// fd 2 at a temporary file (the "original stderr") and restores it at the end.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "health/log_scanner.hpp"
#include "health/stderr_pipe.hpp"

using namespace inferd::health;
using namespace std::chrono_literals;

namespace {

// Points fd 2 at a temporary file for the test's lifetime.
struct CapturedStderr {
  std::filesystem::path path;
  int saved = -1;
  CapturedStderr() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "inferd-stderr-XXXXXX").string();
    const int fd = mkstemp(tmpl.data());
    REQUIRE(fd >= 0);
    path = tmpl;
    std::fflush(stderr);
    saved = dup(STDERR_FILENO);
    dup2(fd, STDERR_FILENO);
    close(fd);
  }
  ~CapturedStderr() {
    std::fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    std::filesystem::remove(path);
  }
  std::string text() const {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
};

struct Lines {
  std::mutex mu;
  std::vector<std::string> lines;
  StderrPipe::LineCallback callback() {
    return [this](std::string_view line) {
      std::lock_guard lock(mu);
      lines.emplace_back(line);
    };
  }
};

void write_fd2(const std::string& s) {
  REQUIRE(write(STDERR_FILENO, s.data(), s.size()) == static_cast<ssize_t>(s.size()));
}

// The ids of this process's threads.
std::set<pid_t> threads() {
  std::set<pid_t> ids;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ids.insert(std::stoi(e.path().filename()));
  return ids;
}

// A thread's state as the scheduler reports it: 'R' running or waiting for a CPU,
// 'S' asleep (in poll, on a futex), ...; 0 once it has exited.
char thread_state(pid_t tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t name_end = stat.rfind(')');  // the name may hold spaces and parentheses
  return name_end == std::string::npos || name_end + 2 >= stat.size() ? 0 : stat[name_end + 2];
}

// fork + exec of /bin/sh -c `script`, inheriting fd 2.
pid_t spawn_shell(const char* script) {
  const pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", script, static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAsanBuild = true;
#else
constexpr bool kAsanBuild = false;
#endif

}  // namespace

TEST_SUITE("health") {
  TEST_CASE("health stderr pipe: lines reach the callback and pass through unchanged") {
    CapturedStderr original;
    Lines seen;
    auto pipe = StderrPipe::install(seen.callback());
    CHECK(pipe->original_fd() > STDERR_FILENO);
    std::fprintf(stderr, "from fprintf %d\n", 42);
    write_fd2("first line\nsecond ");
    write_fd2("half\n\nno newline at the end");
    pipe->uninstall();
    pipe->uninstall();  // idempotent

    CHECK(seen.lines ==
          std::vector<std::string>{"from fprintf 42", "first line", "second half", "", "no newline at the end"});
    CHECK(original.text() == "from fprintf 42\nfirst line\nsecond half\n\nno newline at the end");
    CHECK(pipe->dropped_lines() == 0);
    // fd 2 is the original again.
    write_fd2("after\n");
    CHECK(original.text().ends_with("no newline at the endafter\n"));
  }

  TEST_CASE("health stderr pipe: long lines are split at the bound") {
    CapturedStderr original;
    Lines seen;
    StderrPipeOptions o;
    o.max_line = 8;
    auto pipe = StderrPipe::install(seen.callback(), o);
    const std::string text = std::string(20, 'x') + "\nshort\n" + std::string(16, 'y') + "\n12345678";
    write_fd2(text);
    pipe.reset();  // the destructor uninstalls
    CHECK(seen.lines ==
          std::vector<std::string>{"xxxxxxxx", "xxxxxxxx", "xxxx", "short", "yyyyyyyy", "yyyyyyyy", "12345678"});
    CHECK(original.text() == text);
  }

  TEST_CASE("health stderr pipe: a stuck callback drops lines but never blocks writers") {
    CapturedStderr original;
    std::promise<void> release;
    std::shared_future<void> released = release.get_future().share();
    StderrPipeOptions o;
    o.queue_lines = 4;
    auto pipe = StderrPipe::install([released](std::string_view) { released.wait(); }, o);

    // Far more than a pipe buffer: a write-through that waited on the callback would block here.
    constexpr int kLines = 20000;
    auto writer = std::async(std::launch::async, [] {
      for (int i = 0; i < kLines; ++i) write_fd2("line " + std::to_string(i) + " of the flood\n");
    });
    const bool finished = writer.wait_for(20s) == std::future_status::ready;
    CHECK(finished);
    release.set_value();
    writer.wait();
    pipe->uninstall();
    CHECK(pipe->dropped_lines() > 0);
    const std::string text = original.text();
    CHECK(std::count(text.begin(), text.end(), '\n') == kLines);
    CHECK(text.ends_with("line 19999 of the flood\n"));
  }

  TEST_CASE("health stderr pipe: a child's inherited stderr reaches the log scanner") {
    CapturedStderr original;
    LogScanner scanner;
    scanner.mark_baseline();
    auto pipe = StderrPipe::install([&](std::string_view line) { scanner.scan(line); });
    const pid_t pid = spawn_shell("echo \"UCX  ERROR foo\" >&2");
    REQUIRE(pid > 0);
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    pipe->uninstall();

    CHECK(original.text() == "UCX  ERROR foo\n");
    const LogObservation obs = scanner.sample();
    CHECK(obs.signal.level == Level::Shed);
    // The reason names the category only (it is logged, and the line would match again).
    CHECK(obs.signal.reason.find("ucx") != std::string::npos);
    bool seen = false;
    for (const auto& c : obs.counts) seen |= c.last_line == "UCX  ERROR foo";
    CHECK(seen);
  }

  TEST_CASE("health stderr pipe: fd 2 replaced behind its back: no busy loop, uninstall still works") {
    CapturedStderr original;
    Lines seen;
    const std::set<pid_t> others = threads();
    auto pipe = StderrPipe::install(seen.callback());
    std::set<pid_t> own;  // the pipe's reader and callback threads
    std::ranges::set_difference(threads(), others, std::inserter(own, own.end()));
    REQUIRE_FALSE(own.empty());
    write_fd2("before\n");
    // Someone else points fd 2 elsewhere: the pipe's last writer is gone (EOF),
    // and the pipe reads as ready for ever.
    dup2(pipe->original_fd(), STDERR_FILENO);
    // Not busy: its threads go to sleep and stay asleep. Their states, not the
    // CPU they used: a thread spinning on a loaded machine gets little CPU, but
    // it is never asleep (bounded, so a spinning reader fails the test).
    auto asleep = [&] { return std::ranges::all_of(own, [](pid_t t) { return thread_state(t) == 'S'; }); };
    bool slept = false;
    for (int i = 0; i < 1000 && !slept; ++i) {
      slept = asleep();
      if (!slept) std::this_thread::sleep_for(10ms);
    }
    CHECK(slept);
    int awake = 0;
    for (int i = 0; i < 20; ++i, std::this_thread::sleep_for(10ms)) awake += !asleep();
    CHECK(awake == 0);
    pipe->uninstall();
    CHECK(seen.lines == std::vector<std::string>{"before"});
  }

  TEST_CASE("health stderr pipe: a child still holding the pipe does not delay uninstall") {
    CapturedStderr original;
    Lines seen;
    auto pipe = StderrPipe::install(seen.callback());
    const pid_t pid = spawn_shell("echo started >&2; exec sleep 30");
    REQUIRE(pid > 0);
    // Wait for the child's line so it surely holds the pipe.
    for (int i = 0; i < 3000 && original.text().empty(); ++i) std::this_thread::sleep_for(10ms);
    const auto t0 = std::chrono::steady_clock::now();
    pipe->uninstall();
    CHECK(std::chrono::steady_clock::now() - t0 < 5s);
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    CHECK(seen.lines == std::vector<std::string>{"started"});
  }

  // The runtime writes a report and exits at once: through the pipe, the end of
  // the report would die unread with the reader thread. (A -Db_sanitize=address build only.)
  TEST_CASE("health stderr pipe: an AddressSanitizer report reaches the original stderr whole" *
            doctest::skip(!kAsanBuild)) {
    CapturedStderr original;
    std::fflush(nullptr);
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      auto pipe = StderrPipe::install([](std::string_view) {});
      // A size the compiler cannot see: UBSan's object-size check would report
      // first otherwise, and its reports do not follow the report descriptor
      // (docs/OPERATIONS.md, "Sanitizers").
      // A volatile store, or the optimizer drops the unread allocation whole.
      volatile std::size_t size = 8;
      volatile char* heap = new char[size];
      heap[size] = 1;  // heap-buffer-overflow: the runtime reports and exits
      _exit(0);
    }
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    const std::string text = original.text();
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 66);  // tools/sanitizers/options.cpp
    CHECK_MESSAGE(text.find("SUMMARY: AddressSanitizer: heap-buffer-overflow") != std::string::npos, text);
  }
}
