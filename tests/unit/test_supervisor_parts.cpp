// The supervisor's plain-value parts: [health] translated into monitor settings,
// and the JSON /admin/supervisor and /health/generate answer.
#include <doctest/doctest.h>

#include <boost/json/parse.hpp>

#include "daemon/monitor_settings.hpp"
#include "daemon/supervisor_report.hpp"

using namespace inferd::daemon;
using namespace std::chrono_literals;

TEST_SUITE("supervisor") {
  TEST_CASE("monitor settings: 0 takes interval_ms, the tick is the shortest interval") {
    HealthConfig h;
    h.interval_ms = 250;
    h.meminfo_interval_ms = 40;
    h.process_interval_ms = 1000;
    h.step_deadline_interval_ms = 0;
    h.step_deadline_floor_s = 1.5;
    h.step_deadline_p99_factor = 4;
    const MonitorSettings s = monitor_settings(h);
    CHECK(s.every.psi == 250ms);
    CHECK(s.every.meminfo == 40ms);
    CHECK(s.every.process == 1000ms);
    CHECK(s.every.step_deadline == 250ms);
    CHECK(s.every.tick == 40ms);
    CHECK(s.step_deadline.floor == 1500ms);
    CHECK(s.step_deadline.p99_factor == 4);
    CHECK(s.policy.max_recoveries == h.max_recoveries);
    CHECK(s.policy.recovery_window == std::chrono::seconds(h.recovery_window_s));
  }

  TEST_CASE("monitor settings: log_patterns add 'category level regex' lines to the defaults") {
    HealthConfig h;
    const size_t defaults = monitor_settings(h).scanner.patterns.size();
    h.log_patterns = "disk critical I/O error .*\n\n  gpu warn Xid [0-9]+\n";
    const auto patterns = monitor_settings(h).scanner.patterns;
    REQUIRE(patterns.size() == defaults + 2);
    CHECK(patterns[defaults].category == "disk");
    CHECK(patterns[defaults].regex == "I/O error .*");
    CHECK(patterns[defaults].level == inferd::health::Level::Critical);
    CHECK(patterns[defaults + 1].level == inferd::health::Level::Warn);
    h.log_patterns = "disk fatal oops";
    CHECK_THROWS_WITH_AS(monitor_settings(h),
                         "[health] log_patterns: line 1 'disk fatal oops': level must be warn, shed or critical, got 'fatal'",
                         ConfigError);
    h.log_patterns = "disk critical";
    CHECK_THROWS_AS(monitor_settings(h), ConfigError);
  }

  TEST_CASE("supervisor report: the status and the last generation probe as JSON") {
    SupervisorStatus s;
    s.enabled = true;
    s.state = State::Degraded;
    s.budget = {1, 3, 600s};
    s.monitors = {{"log", inferd::health::Level::Shed, "1 new nccl line"}};
    DecisionRecord r;
    r.id = 7;
    r.at = std::chrono::system_clock::time_point(1700000000500ms);
    r.decision = {inferd::health::Action::Shed, inferd::health::Level::Shed, {"log"}, "log: 1 new nccl line"};
    r.outcome = "state Degraded";
    s.decisions = {r};
    const auto j = boost::json::parse(supervisor_json(s)).as_object();
    CHECK(j.at("enabled").as_bool());
    CHECK(j.at("state").as_string() == "Degraded");
    CHECK(j.at("recoveries_in_window").as_int64() == 1);
    CHECK(j.at("max_recoveries").as_int64() == 3);
    CHECK(j.at("recovery_window_s").as_int64() == 600);
    CHECK(j.at("monitors").at(0).at("level").as_string() == "shed");
    const auto& d = j.at("decisions").at(0);
    CHECK(d.at("id").as_int64() == 7);
    CHECK(d.at("at").as_double() == doctest::Approx(1700000000.5));
    CHECK(d.at("action").as_string() == "shed");
    CHECK(d.at("monitors").at(0).as_string() == "log");
    CHECK(d.at("outcome").as_string() == "state Degraded");

    const auto never = boost::json::parse(probe_json({})).as_object();
    CHECK(!never.at("ok").as_bool());
    CHECK(never.at("reason").as_string() == "no generation probe has run yet");
    CHECK(!never.contains("at"));
    inferd::health::ProbeResult ran;
    ran.ran = ran.ok = true;
    ran.text = " Paris";
    const auto ok = boost::json::parse(probe_json(ran)).as_object();
    CHECK(ok.at("ok").as_bool());
    CHECK(ok.at("text").as_string() == " Paris");
    CHECK(ok.contains("at"));
  }
}
