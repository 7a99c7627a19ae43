#include <doctest/doctest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "faults/fault_points.hpp"
#include "engine/step_heartbeat.hpp"
#include "health/step_deadline.hpp"

using namespace inferd::health;
using namespace std::chrono_literals;
using inferd::engine::StepHeartbeat;

TEST_SUITE("health") {
  TEST_CASE("health step deadline: the deadline is max(floor, k x p99) over a ring of recent steps") {
    StepHeartbeat hb;
    StepDeadlineOptions o;
    o.floor = 50ms;
    o.p99_factor = 2.0;
    o.window = 100;
    o.min_samples = 10;
    StepDeadlineMonitor monitor(hb, o);
    CHECK(monitor.p99() == 0ns);
    CHECK(monitor.slowest() == 0ns);
    CHECK(monitor.deadline() == 50ms);
    for (int i = 1; i <= 9; ++i) monitor.record_step(std::chrono::milliseconds(i * 100));
    CHECK(monitor.deadline() == 50ms);  // below min_samples: the floor alone
    for (int i = 10; i <= 100; ++i) monitor.record_step(std::chrono::milliseconds(i));
    // 9 slow steps of 100..900 ms and 91 of 10..100 ms: p99 is the second largest.
    CHECK(monitor.p99() == 800ms);
    CHECK(monitor.deadline() == 1600ms);
    CHECK(monitor.slowest() == 900ms);
    // The ring forgets: 100 fast steps replace everything.
    for (int i = 0; i < 100; ++i) monitor.record_step(1ms);
    CHECK(monitor.p99() == 1ms);
    CHECK(monitor.deadline() == 50ms);
    CHECK(monitor.slowest() == 1ms);

    const StepObservation obs = monitor.sample();
    CHECK(obs.signal.monitor == "step_deadline");
    CHECK(obs.idle);
    CHECK(obs.signal.level == Level::Ok);
    CHECK(obs.deadline == 50ms);
    CHECK(obs.p99 == 1ms);
  }

  TEST_CASE("health step deadline: a step is held to steps of like work (tokens x context), not to the p99 of all") {
    StepHeartbeat hb;
    StepDeadlineOptions o;
    o.floor = 1s;
    o.p99_factor = 10.0;
    o.min_samples = 10;
    StepDeadlineMonitor monitor(hb, o);
    // Mostly decodes (work ~500: one token at a context of 500) of 9 ms, and a
    // few prefill chunks of 2048 tokens at a context of 4096 (work ~8.4M) of 2 s.
    for (int i = 0; i < 100; ++i) monitor.record_step(9ms, 400 + i);
    for (int i = 0; i < 3; ++i) monitor.record_step(2s, 2048 * 4096);
    // The p99 of all steps is a decode's: with it a long chunk would be a wedge at 10 s.
    CHECK(monitor.p99() == 2s);  // 3 of 103 lie above the 99th percentile's rank
    CHECK(monitor.expected(400) == 9ms);
    CHECK(monitor.deadline(400) == 1s);  // the floor
    CHECK(monitor.expected(2048 * 4096) == 2s);
    CHECK(monitor.deadline(2048 * 4096) == 20s);
    // A chunk at twice that context: its own bucket's steps scaled to its work.
    CHECK(monitor.expected(2048 * 8192) == 4s);
    // Heavier than anything seen: the heaviest bucket's steps, scaled by the ratio.
    CHECK(monitor.expected(uint64_t(2048) * 4096 * 8) == 16s);
    // Between buckets: the heaviest lighter one, scaled up (decodes x 100 work).
    CHECK(monitor.expected(50000) > 9ms * 100);
    // Lighter than anything seen: the lightest bucket, not scaled down.
    CHECK(monitor.expected(1) == 9ms);

    // What sample() reports for a step in progress of that work.
    hb.begin_step(2048 * 8192);
    const StepObservation obs = monitor.sample();
    CHECK(obs.work == uint64_t(2048) * 8192);
    CHECK(obs.expected == 4s);
    CHECK(obs.deadline == 40s);
    CHECK(obs.signal.level == Level::Ok);
    hb.end_step();
    CHECK(hb.last_work() == uint64_t(2048) * 8192);
  }

  TEST_CASE("health step deadline: a stuck engine thread is reported from another thread") {
    StepHeartbeat hb;
    StepDeadlineOptions o;
    o.floor = 30ms;
    StepDeadlineMonitor monitor(hb, o);

    std::mutex mu;
    std::condition_variable cv;
    bool unstick = false, started = false;
    std::thread engine([&] {
      hb.begin_step();
      std::unique_lock lock(mu);
      started = true;
      cv.notify_all();
      cv.wait(lock, [&] { return unstick; });  // the "wedged collective"
      hb.end_step();
    });
    {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return started; });
    }
    StepObservation obs = monitor.sample();
    for (int i = 0; i < 500 && obs.signal.level == Level::Ok; ++i) {
      std::this_thread::sleep_for(5ms);
      obs = monitor.sample();
    }
    CHECK(obs.signal.level == Level::Critical);
    CHECK(obs.signal.reason.find("wedge suspected") != std::string::npos);
    CHECK_FALSE(obs.idle);
    CHECK(obs.step_age >= 30ms);
    {
      std::lock_guard lock(mu);
      unstick = true;
    }
    cv.notify_all();
    engine.join();
    obs = monitor.sample();
    CHECK(obs.signal.level == Level::Ok);
    CHECK(obs.steps_completed == 1);
  }

  // Only in builds with fault points (-Dfaults=true).
#if INFERD_FAULTS
  TEST_CASE("health step deadline: the heartbeat.stall fault point reads as a wedge") {
    StepHeartbeat hb;
    StepDeadlineMonitor monitor(hb);
    CHECK(monitor.sample().signal.level == Level::Ok);
    inferd::faults::arm_fault("heartbeat.stall");
    CHECK(monitor.sample().signal.level == Level::Critical);
    inferd::faults::disarm_fault("heartbeat.stall");
    CHECK(monitor.sample().signal.level == Level::Ok);
  }
#endif
}
