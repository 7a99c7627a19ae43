#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "daemon/metrics.hpp"

using namespace inferd::daemon;

namespace {

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos || text.starts_with(line + "\n");
}

}  // namespace

TEST_CASE("metrics: counters and gauges render with HELP, TYPE and labels") {
  Metrics m;
  m.counter("inferd_things_total", "Things seen.", {{"kind", "a"}}).inc();
  m.counter("inferd_things_total", "Things seen.", {{"kind", "a"}}).inc(2);
  m.counter("inferd_things_total", "Things seen.", {{"kind", "b"}}).inc(0.5);
  m.counter("inferd_things_total", "Things seen.", {{"kind", "b"}}).inc(-7);  // ignored: counters only go up
  Gauge& g = m.gauge("inferd_level", "A level.");
  g.set(10);
  g.dec(2.5);

  const std::string text = m.render();
  CHECK(has_line(text, "# HELP inferd_things_total Things seen."));
  CHECK(has_line(text, "# TYPE inferd_things_total counter"));
  CHECK(has_line(text, "inferd_things_total{kind=\"a\"} 3"));
  CHECK(has_line(text, "inferd_things_total{kind=\"b\"} 0.5"));
  CHECK(has_line(text, "# TYPE inferd_level gauge"));
  CHECK(has_line(text, "inferd_level 7.5"));
  // Families sorted by name, so the output is stable.
  CHECK(text.find("inferd_level") < text.find("inferd_things_total"));
  CHECK(text.back() == '\n');
}

TEST_CASE("metrics: label values and help text are escaped") {
  Metrics m;
  m.gauge("inferd_odd", "Line one\nback\\slash", {{"v", "a\"b\\c\nd"}}).set(1);
  const std::string text = m.render();
  CHECK(has_line(text, "# HELP inferd_odd Line one\\nback\\\\slash"));
  CHECK(has_line(text, "inferd_odd{v=\"a\\\"b\\\\c\\nd\"} 1"));
  CHECK(escape_label_value("plain") == "plain");
}

TEST_CASE("metrics: values use the exposition format's spelling") {
  CHECK(format_metric_value(3) == "3");
  CHECK(format_metric_value(0.25) == "0.25");
  CHECK(format_metric_value(-2) == "-2");
  CHECK(format_metric_value(std::numeric_limits<double>::infinity()) == "+Inf");
  CHECK(format_metric_value(-std::numeric_limits<double>::infinity()) == "-Inf");
  CHECK(format_metric_value(std::nan("")) == "NaN");
  CHECK(std::stod(format_metric_value(1e-9)) == 1e-9);
}

TEST_CASE("metrics: histograms have cumulative buckets, +Inf, sum and count") {
  Metrics m;
  Histogram& h = m.histogram("inferd_latency_seconds", "Latency.", {{"route", "/x"}}, {0.25, 1, 10});
  h.observe(0.125);
  h.observe(0.25);  // on a bound: counts in that bucket (le is "less or equal")
  h.observe(0.5);
  h.observe(100);
  const std::string text = m.render();
  CHECK(has_line(text, "# TYPE inferd_latency_seconds histogram"));
  CHECK(has_line(text, "inferd_latency_seconds_bucket{route=\"/x\",le=\"0.25\"} 2"));
  CHECK(has_line(text, "inferd_latency_seconds_bucket{route=\"/x\",le=\"1\"} 3"));
  CHECK(has_line(text, "inferd_latency_seconds_bucket{route=\"/x\",le=\"10\"} 3"));
  CHECK(has_line(text, "inferd_latency_seconds_bucket{route=\"/x\",le=\"+Inf\"} 4"));
  CHECK(has_line(text, "inferd_latency_seconds_sum{route=\"/x\"} 100.875"));
  CHECK(has_line(text, "inferd_latency_seconds_count{route=\"/x\"} 4"));

  // A second series of the family keeps the family's buckets, whatever it asks for.
  m.histogram("inferd_latency_seconds", "Latency.", {{"route", "/y"}}, {5}).observe(2);
  CHECK(has_line(m.render(), "inferd_latency_seconds_bucket{route=\"/y\",le=\"10\"} 1"));
}

TEST_CASE("metrics: names and labels are checked") {
  Metrics m;
  CHECK_NOTHROW(m.gauge("vllm:num_requests_running", "Requests running.").set(2));
  CHECK(has_line(m.render(), "vllm:num_requests_running 2"));
  CHECK_THROWS_AS(m.counter("9lives", "bad"), std::invalid_argument);
  CHECK_THROWS_AS(m.counter("has space", "bad"), std::invalid_argument);
  CHECK_THROWS_AS(m.counter("", "bad"), std::invalid_argument);
  CHECK_THROWS_AS(m.counter("inferd_ok_total", "ok", {{"bad-label", "x"}}), std::invalid_argument);
  CHECK_THROWS_AS(m.counter("inferd_ok_total", "ok", {{"__reserved", "x"}}), std::invalid_argument);
  CHECK_THROWS_AS(m.histogram("inferd_h", "h", {{"le", "1"}}), std::invalid_argument);
  CHECK_THROWS_AS(m.histogram("inferd_h2", "h", {}, {1, 1}), std::invalid_argument);
  // One name keeps one type.
  CHECK_THROWS_AS(m.counter("vllm:num_requests_running", "now a counter?"), std::invalid_argument);
}

TEST_CASE("metrics: collectors are computed at scrape time") {
  Metrics m;
  double level = 1;
  m.add_gauge_fn("inferd_computed", "Computed.", [&] { return level; });
  m.add_collector("inferd_state", "One per state.", MetricType::Gauge, [&] {
    // A collector may use the registry it belongs to.
    const double seen = m.counter("inferd_scrapes_total", "Scrapes.").value();
    m.counter("inferd_scrapes_total", "Scrapes.").inc();
    return std::vector<Metrics::Sample>{{{{"state", "A"}}, 1}, {{{"state", "B"}}, seen}};
  });
  CHECK(has_line(m.render(), "inferd_computed 1"));
  level = 42;
  const std::string text = m.render();
  CHECK(has_line(text, "inferd_computed 42"));
  CHECK(has_line(text, "# TYPE inferd_state gauge"));
  CHECK(has_line(text, "inferd_state{state=\"A\"} 1"));
  CHECK(has_line(text, "inferd_state{state=\"B\"} 1"));
  CHECK_THROWS_AS(m.add_gauge_fn("inferd_computed", "again", [] { return 0.0; }), std::invalid_argument);
  CHECK_THROWS_AS(m.gauge("inferd_computed", "set by hand?"), std::invalid_argument);
}

TEST_CASE("metrics: concurrent updates are not lost") {
  Metrics m;
  constexpr int kThreads = 4, kEach = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        m.counter("inferd_hits_total", "Hits.", {{"t", std::to_string(t % 2)}}).inc();
        m.histogram("inferd_h_seconds", "H.").observe(0.002);
        if (i % 1000 == 0) (void)m.render();
      }
    });
  }
  for (auto& th : threads) th.join();
  const std::string text = m.render();
  CHECK(has_line(text, "inferd_hits_total{t=\"0\"} " + std::to_string(kThreads / 2 * kEach)));
  CHECK(has_line(text, "inferd_hits_total{t=\"1\"} " + std::to_string(kThreads / 2 * kEach)));
  CHECK(has_line(text, "inferd_h_seconds_count " + std::to_string(kThreads * kEach)));
  CHECK(has_line(text, "inferd_h_seconds_bucket{le=\"0.001\"} 0"));
  CHECK(has_line(text, "inferd_h_seconds_bucket{le=\"0.005\"} " + std::to_string(kThreads * kEach)));
}
