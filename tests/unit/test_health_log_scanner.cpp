#include <doctest/doctest.h>

#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "health/log_scanner.hpp"

using namespace inferd::health;

namespace {

LogCount count_of(const LogScanner& s, const std::string& category) {
  for (const LogCount& c : s.counts())
    if (c.category == category) return c;
  FAIL("no category " << category);
  return {};
}

}  // namespace

TEST_SUITE("health") {
  TEST_CASE("health log scanner: the default patterns sort real lines into categories") {
    LogScanner s;
    struct Case {
      const char* line;
      const char* category;
    };
    const Case cases[] = {
        {"node1:123:456 [0] NCCL WARN NET/IB : Got completion with error 12", "nccl"},
        {"NCCL failure common.cu:957 'unhandled system error'", "nccl"},
        {"[1700000000.1] [node1:123:0] ucp_worker.c:1234 UCX  ERROR failed to connect", "ucx"},
        {"[node1:1:0] UCX  WARN  rcache: mmap(addr) failed", "ucx"},
        {"ucp_context leak detected", "ucx"},
        {"memory registration cache is full", "ucx"},
        {"CUDA error: an illegal memory access was encountered", "cuda"},
        {"returned cudaErrorLaunchFailure", "cuda"},
        {"cublas failed with CUBLAS_STATUS_EXECUTION_FAILED", "cuda"},
        {"ibv_create_qp failed: Cannot allocate memory", "ibverbs"},
        {"mlx5: node1: got completion with error:", "ibverbs"},
        {"Out of memory: Killed process 4242 (inferd)", "oom"},
        {"inferd invoked oom-killer: gfp_mask=0x0", "oom"},
    };
    for (const Case& c : cases) {
      CAPTURE(c.line);
      const uint64_t before = count_of(s, c.category).before_baseline;
      CHECK(s.scan(c.line));
      CHECK(count_of(s, c.category).before_baseline == before + 1);
    }
    for (const char* quiet : {"", "INFO engine ready", "NCCL INFO Bootstrap : Using eth0", "UCX  INFO ok",
                              "cuda graphs captured: 12", "the error rate is low"}) {
      CAPTURE(quiet);
      CHECK_FALSE(s.scan(quiet));
    }
    // A line that matches two patterns of one category counts once there.
    LogScanner once;
    CHECK(once.scan("NCCL WARN and an NCCL error"));
    CHECK(count_of(once, "nccl").before_baseline == 1);
    CHECK(count_of(once, "nccl").last_line == "NCCL WARN and an NCCL error");
  }

  TEST_CASE("health log scanner: only lines after the baseline raise a signal, each batch once") {
    LogScanner s;
    CHECK_FALSE(s.baseline_marked());
    s.scan("CUDA error: startup noise");
    s.scan("NCCL WARN startup noise");
    LogObservation obs = s.sample();
    CHECK(obs.signal.monitor == "log");
    CHECK(obs.signal.level == Level::Ok);  // before the baseline: counted, not signalled
    CHECK(count_of(s, "cuda").before_baseline == 1);
    CHECK(s.errors_after_baseline() == 0);

    s.mark_baseline();
    CHECK(s.baseline_marked());
    CHECK(s.sample().signal.level == Level::Ok);
    s.scan("x NCCL WARN late");
    obs = s.sample();
    CHECK(obs.signal.level == Level::Warn);
    CHECK(obs.signal.reason.find("nccl") != std::string::npos);
    CHECK(s.sample().signal.level == Level::Ok);  // nothing new since
    s.scan("NCCL WARN again");
    s.scan("[0] UCX  ERROR boom");
    s.scan("CUDA error: device-side assert");
    obs = s.sample();
    CHECK(obs.signal.level == Level::Critical);
    CHECK(obs.signal.reason.find("cuda") != std::string::npos);
    CHECK(count_of(s, "nccl").after_baseline == 2);
    CHECK(count_of(s, "nccl").before_baseline == 1);
    CHECK(count_of(s, "ucx").after_baseline == 1);
    CHECK(s.errors_after_baseline() == 4);

    // A new baseline (after a recovery) folds the post-baseline counts into "before".
    s.mark_baseline();
    CHECK(s.errors_after_baseline() == 0);
    CHECK(count_of(s, "nccl").before_baseline == 3);
    CHECK(s.sample().signal.level == Level::Ok);
  }

  TEST_CASE("health log scanner: configurable patterns; a bad regex is an error naming it") {
    LogScannerOptions o;
    o.patterns = {{"mine", "^FATAL\\b", Level::Critical}, {"mine", "warn(ing)?", Level::Warn}};
    LogScanner s(o);
    REQUIRE(s.counts().size() == 1);
    s.mark_baseline();
    CHECK_FALSE(s.scan("not FATAL here"));
    CHECK(s.scan("FATAL: x"));
    CHECK(s.sample().signal.level == Level::Critical);

    o.patterns = {{"bad", "(unclosed", Level::Warn}};
    CHECK_THROWS_WITH_AS(LogScanner{o}, doctest::Contains("(unclosed"), std::invalid_argument);
  }

  TEST_CASE("health log scanner: scan from reader threads while the supervisor reads") {
    LogScanner s;
    s.mark_baseline();
    constexpr int kThreads = 4, kLines = 2000;
    std::vector<std::thread> readers;
    for (int t = 0; t < kThreads; ++t)
      readers.emplace_back([&] {
        for (int i = 0; i < kLines; ++i) s.scan(i % 2 ? "UCX  ERROR x" : "plain line");
      });
    uint64_t seen = 0;
    for (int i = 0; i < 200; ++i) {
      const uint64_t now = s.errors_after_baseline();
      CHECK(now >= seen);  // monotonic while the readers run
      seen = now;
      s.sample();
    }
    for (auto& r : readers) r.join();
    CHECK(count_of(s, "ucx").after_baseline == kThreads * kLines / 2);
  }
}
