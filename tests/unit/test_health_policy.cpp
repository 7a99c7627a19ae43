#include <doctest/doctest.h>

#include <chrono>

#include "health/policy.hpp"

using namespace inferd::health;
using namespace std::chrono_literals;

namespace {

Signal sig(const char* monitor, Level level, const char* reason = "why") { return {monitor, level, reason}; }

PolicyOptions options() {
  PolicyOptions o;
  o.calm_samples_to_unshed = 3;
  o.max_recoveries = 2;
  o.recovery_window = 60s;
  return o;
}

}  // namespace

TEST_SUITE("health") {
  TEST_CASE("health policy: ok and warn samples decide nothing") {
    Policy p(options());
    const auto t = Policy::Clock::now();
    CHECK(p.decide({}, t).action == Action::None);
    CHECK(p.decide({sig("psi", Level::Ok), sig("meminfo", Level::Warn)}, t).action == Action::None);
  }

  TEST_CASE("health policy: shed once, stay shedding while it lasts, unshed after enough calm samples in a row") {
    Policy p(options());
    auto t = Policy::Clock::now();
    const Decision shed = p.decide({sig("psi", Level::Shed, "stall 40%"), sig("meminfo", Level::Warn)}, t);
    CHECK(shed.action == Action::Shed);
    CHECK(shed.level == Level::Shed);
    CHECK(shed.monitors == std::vector<std::string>{"psi"});
    CHECK(shed.reason == "psi: stall 40%");
    CHECK(p.decide({sig("psi", Level::Shed)}, t += 1s).action == Action::None);  // already shedding

    // Two calm samples, then pressure again: the calm count starts over.
    CHECK(p.decide({sig("psi", Level::Ok)}, t += 1s).action == Action::None);
    CHECK(p.decide({sig("psi", Level::Warn)}, t += 1s).action == Action::None);
    CHECK(p.decide({sig("psi", Level::Shed)}, t += 1s).action == Action::None);
    CHECK(p.decide({sig("psi", Level::Ok)}, t += 1s).action == Action::None);
    CHECK(p.decide({sig("psi", Level::Ok)}, t += 1s).action == Action::None);
    const Decision unshed = p.decide({sig("psi", Level::Ok)}, t += 1s);
    CHECK(unshed.action == Action::Unshed);
    CHECK(unshed.reason == "calm for 3 samples");
    CHECK(p.decide({sig("psi", Level::Ok)}, t += 1s).action == Action::None);  // not shedding any more
  }

  TEST_CASE("health policy: critical beats shed and names every monitor at that level") {
    Policy p(options());
    const Decision d = p.decide({sig("psi", Level::Shed), sig("probe", Level::Critical, "mismatch"),
                                 sig("step_deadline", Level::Critical, "step 3.1 s over 1.5 s")},
                                Policy::Clock::now());
    CHECK(d.action == Action::Recover);
    CHECK(d.level == Level::Critical);
    CHECK(d.monitors == std::vector<std::string>{"probe", "step_deadline"});
    CHECK(d.reason == "probe: mismatch; step_deadline: step 3.1 s over 1.5 s");
  }

  TEST_CASE("health policy: a recovery ends shedding; pressure that remains sheds again") {
    Policy p(options());
    auto t = Policy::Clock::now();
    CHECK(p.decide({sig("psi", Level::Shed)}, t).action == Action::Shed);
    CHECK(p.decide({sig("probe", Level::Critical)}, t += 1s).action == Action::Recover);
    CHECK(p.decide({sig("psi", Level::Shed)}, t += 1s).action == Action::Shed);
  }

  TEST_CASE("health policy: the recovery budget fails the process, and frees up as the window slides") {
    Policy p(options());  // 2 recoveries per 60 s
    const auto t0 = Policy::Clock::now();
    const std::vector<Signal> critical{sig("probe", Level::Critical, "mismatch")};
    CHECK(p.decide(critical, t0).action == Action::Recover);
    CHECK(p.decide(critical, t0 + 10s).action == Action::Recover);
    CHECK(p.recoveries_in_window(t0 + 10s) == 2);
    const Decision fail = p.decide(critical, t0 + 20s);
    CHECK(fail.action == Action::Fail);
    CHECK(fail.reason == "probe: mismatch (and 2 recoveries already in the last 60 s)");
    // A refused recovery is not counted; once the first leaves the window, one is allowed again.
    CHECK(p.recoveries_in_window(t0 + 20s) == 2);
    CHECK(p.recoveries_in_window(t0 + 61s) == 1);
    CHECK(p.decide(critical, t0 + 61s).action == Action::Recover);
    CHECK(p.decide(critical, t0 + 62s).action == Action::Fail);
  }
}
