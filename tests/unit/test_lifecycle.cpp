#include <doctest/doctest.h>

#include <set>
#include <string>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "daemon/lifecycle.hpp"

using inferd::daemon::kStateCount;
using inferd::daemon::Lifecycle;
using inferd::daemon::State;

namespace {

// Every transition logs; these tests take hundreds.
struct QuietLog {
  spdlog::level::level_enum saved = spdlog::get_level();
  QuietLog() { spdlog::set_level(spdlog::level::off); }
  ~QuietLog() { spdlog::set_level(saved); }
};

constexpr State kAll[] = {State::Starting, State::Loading,  State::Warming, State::Serving, State::Degraded,
                          State::Recovering, State::Draining, State::Stopped, State::Failed};

// The edges of DESIGN.md's drawing, written out by hand.
std::set<std::pair<State, State>> drawn_edges() {
  using enum State;
  std::set<std::pair<State, State>> edges = {
      {Starting, Loading}, {Loading, Warming},      {Warming, Serving},      {Serving, Degraded},
      {Degraded, Serving}, {Serving, Recovering},   {Degraded, Recovering},  {Recovering, Warming},
      {Draining, Stopped},
  };
  for (State s : {Starting, Loading, Warming, Serving, Degraded, Recovering}) edges.insert({s, Draining});
  for (State s : {Starting, Loading, Warming, Serving, Degraded, Recovering, Draining}) edges.insert({s, Failed});
  return edges;
}

// Drives a fresh lifecycle into `target` along drawn edges.
void reach(Lifecycle& lc, State target) {
  using enum State;
  const std::vector<State> path = [&]() -> std::vector<State> {
    switch (target) {
      case Starting: return {};
      case Loading: return {Loading};
      case Warming: return {Loading, Warming};
      case Serving: return {Loading, Warming, Serving};
      case Degraded: return {Loading, Warming, Serving, Degraded};
      case Recovering: return {Loading, Warming, Serving, Recovering};
      case Draining: return {Draining};
      case Stopped: return {Draining, Stopped};
      case Failed: return {Failed};
    }
    return {};
  }();
  for (State s : path) REQUIRE(lc.transition(s, "test"));
  REQUIRE(lc.state() == target);
}

}  // namespace

TEST_SUITE("lifecycle") {
  TEST_CASE_FIXTURE(QuietLog, "lifecycle: allowed() is exactly the drawn edges") {
    const auto edges = drawn_edges();
    for (State from : kAll)
      for (State to : kAll) {
        CAPTURE(to_string(from));
        CAPTURE(to_string(to));
        CHECK(Lifecycle::allowed(from, to) == edges.contains({from, to}));
      }
  }

  TEST_CASE_FIXTURE(QuietLog, "lifecycle: every allowed edge can be taken and every other one is refused") {
    for (State from : kAll)
      for (State to : kAll) {
        CAPTURE(to_string(from));
        CAPTURE(to_string(to));
        Lifecycle lc;
        reach(lc, from);
        const auto before = lc.transition_counts();
        const bool ok = lc.transition(to, "every edge");
        CHECK(ok == Lifecycle::allowed(from, to));
        CHECK(lc.state() == (ok ? to : from));
        const auto after = lc.transition_counts();
        CHECK(after[size_t(from)][size_t(to)] == before[size_t(from)][size_t(to)] + (ok ? 1 : 0));
      }
  }

  TEST_CASE_FIXTURE(QuietLog, "lifecycle: starts in Starting; Stopped and Failed are final") {
    Lifecycle lc;
    CHECK(lc.state() == State::Starting);
    reach(lc, State::Stopped);
    for (State to : kAll) CHECK_FALSE(lc.transition(to, "after stop"));
    Lifecycle failed;
    reach(failed, State::Failed);
    for (State to : kAll) CHECK_FALSE(failed.transition(to, "after failure"));
  }

  TEST_CASE_FIXTURE(QuietLog, "lifecycle: only Serving and Degraded admit generation") {
    for (State s : kAll) {
      Lifecycle lc;
      reach(lc, s);
      CHECK(lc.admits_generation() == (s == State::Serving));
    }
  }

  TEST_CASE_FIXTURE(QuietLog, "lifecycle: observers see every transition with its reason, in order; refusals are silent") {
    Lifecycle lc;
    std::vector<std::string> seen;
    lc.on_change([&](State from, State to, std::string_view reason) {
      seen.push_back(std::string(to_string(from)) + ">" + std::string(to_string(to)) + ":" + std::string(reason));
    });
    lc.on_change([&](State, State to, std::string_view) { seen.push_back("second:" + std::string(to_string(to))); });
    CHECK(lc.transition(State::Loading, "model m.gguf"));
    CHECK_FALSE(lc.transition(State::Serving, "too early"));
    CHECK(lc.transition(State::Warming, "loaded"));
    CHECK(seen == std::vector<std::string>{"Starting>Loading:model m.gguf", "second:Loading",
                                           "Loading>Warming:loaded", "second:Warming"});
  }

  TEST_CASE_FIXTURE(QuietLog, "lifecycle: recovery loops back through Warming and counts each edge") {
    Lifecycle lc;
    reach(lc, State::Serving);
    for (int i = 0; i < 3; ++i) {
      REQUIRE(lc.transition(State::Degraded, "pressure"));
      REQUIRE(lc.transition(State::Recovering, "wedged step"));
      REQUIRE(lc.transition(State::Warming, "engine restarted"));
      REQUIRE(lc.transition(State::Serving, "warm-up passed"));
    }
    const auto counts = lc.transition_counts();
    CHECK(counts[size_t(State::Warming)][size_t(State::Serving)] == 4);
    CHECK(counts[size_t(State::Degraded)][size_t(State::Recovering)] == 3);
    CHECK(counts[size_t(State::Starting)][size_t(State::Loading)] == 1);
  }

  TEST_CASE_FIXTURE(QuietLog, "lifecycle: activity is observable and a transition clears it") {
    Lifecycle lc;
    std::vector<std::string> seen;
    lc.on_activity([&](State s, std::string_view a) { seen.push_back(std::string(to_string(s)) + ":" + std::string(a)); });
    reach(lc, State::Warming);
    lc.set_activity("ramped");
    lc.set_activity("ramped");  // unchanged: no notification
    lc.set_activity("burst");
    CHECK(lc.activity() == "burst");
    REQUIRE(lc.transition(State::Serving, "gate open"));
    CHECK(lc.activity().empty());
    CHECK(seen == std::vector<std::string>{"Warming:ramped", "Warming:burst"});
  }

  TEST_CASE_FIXTURE(QuietLog, "lifecycle: an observer may itself transition") {
    Lifecycle lc;
    lc.on_change([&](State, State to, std::string_view) {
      if (to == State::Draining) lc.transition(State::Stopped, "nothing in flight");
    });
    reach(lc, State::Serving);
    CHECK(lc.transition(State::Draining, "SIGTERM"));
    CHECK(lc.state() == State::Stopped);
  }

  TEST_CASE_FIXTURE(QuietLog, "lifecycle: state names") {
    CHECK(to_string(State::Serving) == "Serving");
    CHECK(to_string(State::Recovering) == "Recovering");
    CHECK(kStateCount == std::size(kAll));
  }

  TEST_CASE_FIXTURE(QuietLog, "lifecycle: uptime grows") {
    Lifecycle lc;
    CHECK(lc.uptime_s() >= 0.0);
    CHECK(lc.uptime_s() < 60.0);
  }
}
