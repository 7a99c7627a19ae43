// A small Prometheus registry: counters, gauges and histograms with labels, plus
// series computed at scrape time, rendered as text exposition format 0.0.4.
// Every method is thread-safe. Series are created on first use and live as long
// as the registry, so callers on hot paths may keep the returned references.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace inferd::daemon {

// Label (name, value) pairs; the order given is the order rendered.
using Labels = std::vector<std::pair<std::string, std::string>>;

enum class MetricType { Counter, Gauge, Histogram };

class Counter {
 public:
  void inc(double by = 1.0);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Gauge {
 public:
  void set(double v) { value_.store(v, std::memory_order_relaxed); }
  void inc(double by = 1.0) { value_.fetch_add(by, std::memory_order_relaxed); }
  void dec(double by = 1.0) { value_.fetch_sub(by, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Histogram {
 public:
  // `bounds`: the finite upper bounds, strictly increasing; +Inf is implicit.
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);

  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> cumulative;  // one per bound, then +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot snapshot() const;

 private:
  // One lock per series, so a scrape never sees count and buckets disagree.
  mutable std::mutex mu_;
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative), then +Inf
  double sum_ = 0;
};

// Latency buckets (seconds) for requests that may take from milliseconds to minutes.
std::vector<double> default_latency_buckets();

class Metrics {
 public:
  struct Sample {
    Labels labels;
    double value = 0;
  };
  using Collector = std::function<std::vector<Sample>()>;

  Metrics();
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // Get or create a series. A name must match [a-zA-Z_:][a-zA-Z0-9_:]* and keep
  // one type; label names must match [a-zA-Z_][a-zA-Z0-9_]* (and not be "le" for
  // histograms). Violations throw std::invalid_argument: they are programming
  // errors worth failing loudly on.
  Counter& counter(std::string_view name, std::string_view help, const Labels& labels = {});
  Gauge& gauge(std::string_view name, std::string_view help, const Labels& labels = {});
  // The first call for a name fixes its buckets.
  Histogram& histogram(std::string_view name, std::string_view help, const Labels& labels = {},
                       std::vector<double> bounds = default_latency_buckets());

  // Series computed at scrape time from state another object owns (a counter or
  // a gauge). Collectors run outside the registry's lock, so they may use it.
  void add_collector(std::string_view name, std::string_view help, MetricType type, Collector collect);
  // Shorthand for one unlabelled gauge.
  void add_gauge_fn(std::string_view name, std::string_view help, std::function<double()> fn);

  // The whole registry in text exposition format 0.0.4, families sorted by name.
  std::string render() const;

  static constexpr std::string_view kContentType = "text/plain; version=0.0.4; charset=utf-8";

 private:
  struct Family;
  Family& family(std::string_view name, std::string_view help, MetricType type, const Labels& labels);

  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<Family>, std::less<>> families_;
};

// Exposition-format helpers, exposed for tests and for anything else that writes
// the format by hand.
std::string escape_label_value(std::string_view v);
std::string format_metric_value(double v);

}  // namespace inferd::daemon
