#include <doctest/doctest.h>

#include <chrono>
#include <thread>

#include "faults/fault_points.hpp"
#include "engine/step_heartbeat.hpp"

using namespace std::chrono_literals;
using inferd::faults::FaultPoint;
using inferd::engine::StepHeartbeat;

TEST_SUITE("heartbeat") {
  TEST_CASE("heartbeat: idle is healthy; a step older than the deadline is not") {
    StepHeartbeat hb;
    CHECK(hb.idle());
    CHECK(hb.healthy(1ns));
    hb.begin_step();
    CHECK_FALSE(hb.idle());
    CHECK(hb.healthy(10s));
    std::this_thread::sleep_for(20ms);
    CHECK(hb.step_age() >= 20ms);
    CHECK_FALSE(hb.healthy(10ms));
    // Progress inside the step restarts its age: afterwards the age is at most
    // the time since just before the beat, however long this thread waited for
    // a CPU in between (a fixed window would fail on a loaded machine).
    const auto before_beat = StepHeartbeat::Clock::now();
    hb.beat();
    const auto age = hb.step_age();  // read before the clock below: the order matters
    CHECK(age <= StepHeartbeat::Clock::now() - before_beat);
    hb.end_step();
    CHECK(hb.idle());
    CHECK(hb.step_age() == StepHeartbeat::Clock::duration::zero());
    CHECK(hb.steps_completed() == 1);
    hb.begin_step();
    hb.set_idle();
    CHECK(hb.idle());
    CHECK(hb.steps_completed() == 1);
  }

  // Fault points exist only in builds configured with -Dfaults=true (as tools/dev.sh test does).
#if INFERD_FAULTS
  TEST_CASE("heartbeat: the heartbeat.stall fault point reports a stuck step until disarmed") {
    StepHeartbeat hb;
    inferd::faults::arm_fault("heartbeat.stall");
    CHECK_FALSE(hb.healthy(1h));
    CHECK(inferd::faults::disarm_fault("heartbeat.stall"));
    CHECK(hb.healthy(1h));
  }
#endif
}

#if INFERD_FAULTS
TEST_SUITE("fault_points") {
  TEST_CASE("fault points: armed by name, with a value, before or after the point is declared") {
    inferd::faults::disarm_all_faults();
    inferd::faults::arm_fault("test.early", "7");
    const FaultPoint early("test.early");
    const FaultPoint late("test.late");
    CHECK(early.armed());
    CHECK(early.value() == "7");
    CHECK(early.int_value(0) == 7);
    CHECK(early.name() == "test.early");
    CHECK_FALSE(late.armed());
    CHECK(late.int_value(-1) == -1);
    inferd::faults::arm_fault("test.late", "slow");
    CHECK(late.armed());
    CHECK(late.int_value(-1) == -1);
    CHECK(inferd::faults::armed_faults() ==
          std::vector<std::pair<std::string, std::string>>{{"test.early", "7"}, {"test.late", "slow"}});
    CHECK(inferd::faults::disarm_fault("test.early"));
    CHECK_FALSE(inferd::faults::disarm_fault("test.early"));
    CHECK_FALSE(inferd::faults::disarm_fault("test.never"));
    CHECK_FALSE(early.armed());
    CHECK(early.value().empty());
    inferd::faults::disarm_all_faults();
    CHECK_FALSE(late.armed());
    CHECK(inferd::faults::armed_faults().empty());
  }

  TEST_CASE("fault points: INFERD_FAULTS spec") {
    inferd::faults::disarm_all_faults();
    inferd::faults::arm_faults_from_spec(" a.one=1 , a.two,,a.three= x ");
    CHECK(inferd::faults::armed_faults() ==
          std::vector<std::pair<std::string, std::string>>{{"a.one", "1"}, {"a.three", "x"}, {"a.two", ""}});
    inferd::faults::disarm_all_faults();
    CHECK_THROWS_WITH_AS(inferd::faults::arm_faults_from_spec("ok,=3"), "fault item '=3' has no name",
                         std::invalid_argument);
    CHECK(inferd::faults::armed_faults().empty());  // a bad spec arms nothing
    CHECK_THROWS_AS(inferd::faults::arm_fault(""), std::invalid_argument);
  }
}
#endif
