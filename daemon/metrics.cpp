#include "daemon/metrics.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <stdexcept>

namespace inferd::daemon {

namespace {

bool valid_metric_name(std::string_view n) {
  if (n.empty()) return false;
  for (size_t i = 0; i < n.size(); ++i) {
    const char c = n[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

bool valid_label_name(std::string_view n) {
  if (n.empty() || n.starts_with("__")) return false;
  for (size_t i = 0; i < n.size(); ++i) {
    const char c = n[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

std::string_view type_name(MetricType t) {
  switch (t) {
    case MetricType::Counter: return "counter";
    case MetricType::Gauge: return "gauge";
    case MetricType::Histogram: return "histogram";
  }
  return "untyped";
}

std::string escape_help(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

// `{a="1",b="2"}`, with `extra` (e.g. le) appended; empty when there are no labels.
std::string render_labels(const Labels& labels, std::string_view extra_name = {}, std::string_view extra_value = {}) {
  if (labels.empty() && extra_name.empty()) return {};
  std::string out = "{";
  bool first = true;
  auto add = [&](std::string_view n, std::string_view v) {
    if (!first) out += ',';
    first = false;
    out += n;
    out += "=\"";
    out += escape_label_value(v);
    out += '"';
  };
  for (const auto& [n, v] : labels) add(n, v);
  if (!extra_name.empty()) add(extra_name, extra_value);
  out += '}';
  return out;
}

void check_labels(std::string_view metric, const Labels& labels, MetricType type) {
  for (const auto& [n, v] : labels) {
    if (!valid_label_name(n)) throw std::invalid_argument("metric " + std::string(metric) + ": bad label name '" + n + "'");
    if (type == MetricType::Histogram && n == "le")
      throw std::invalid_argument("metric " + std::string(metric) + ": 'le' is reserved for histogram buckets");
  }
}

}  // namespace

std::string escape_label_value(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string format_metric_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  // Shortest round-trip form: integers print without a fraction ("3", not "3.000000").
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, end);
}

void Counter::inc(double by) {
  // Counters only go up; a negative increment is a caller bug, ignored rather than
  // corrupting the series.
  if (by > 0) value_.fetch_add(by, std::memory_order_relaxed);
}

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {
  for (size_t i = 0; i < bounds_.size(); ++i) {
    if (!std::isfinite(bounds_[i]) || (i > 0 && bounds_[i] <= bounds_[i - 1]))
      throw std::invalid_argument("histogram bounds must be finite and strictly increasing");
  }
}

void Histogram::observe(double v) {
  // Bucket i counts le=bounds[i]: the first bound >= v.
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  std::lock_guard lock(mu_);
  ++counts_[i];
  sum_ += v;
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  s.bounds = bounds_;
  std::lock_guard lock(mu_);
  uint64_t running = 0;
  for (uint64_t c : counts_) {
    running += c;
    s.cumulative.push_back(running);
  }
  s.count = running;
  s.sum = sum_;
  return s;
}

std::vector<double> default_latency_buckets() {
  return {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600};
}

struct Metrics::Family {
  std::string help;
  MetricType type;
  std::vector<double> bounds;  // histograms
  std::map<Labels, std::unique_ptr<Counter>> counters;
  std::map<Labels, std::unique_ptr<Gauge>> gauges;
  std::map<Labels, std::unique_ptr<Histogram>> histograms;
  Collector collect;  // set for computed families
};

Metrics::Metrics() = default;
Metrics::~Metrics() = default;

Metrics::Family& Metrics::family(std::string_view name, std::string_view help, MetricType type, const Labels& labels) {
  if (!valid_metric_name(name)) throw std::invalid_argument("bad metric name '" + std::string(name) + "'");
  check_labels(name, labels, type);
  auto it = families_.find(name);
  if (it == families_.end()) {
    auto f = std::make_unique<Family>();
    f->help = help;
    f->type = type;
    it = families_.emplace(std::string(name), std::move(f)).first;
  } else if (it->second->type != type) {
    throw std::invalid_argument("metric " + std::string(name) + " is a " + std::string(type_name(it->second->type)) +
                                ", not a " + std::string(type_name(type)));
  }
  return *it->second;
}

Counter& Metrics::counter(std::string_view name, std::string_view help, const Labels& labels) {
  std::lock_guard lock(mu_);
  Family& f = family(name, help, MetricType::Counter, labels);
  if (f.collect) throw std::invalid_argument("metric " + std::string(name) + " is computed at scrape time");
  auto& slot = f.counters[labels];
  if (!slot) slot = std::make_unique<Counter>();
  return *slot;
}

Gauge& Metrics::gauge(std::string_view name, std::string_view help, const Labels& labels) {
  std::lock_guard lock(mu_);
  Family& f = family(name, help, MetricType::Gauge, labels);
  if (f.collect) throw std::invalid_argument("metric " + std::string(name) + " is computed at scrape time");
  auto& slot = f.gauges[labels];
  if (!slot) slot = std::make_unique<Gauge>();
  return *slot;
}

Histogram& Metrics::histogram(std::string_view name, std::string_view help, const Labels& labels,
                              std::vector<double> bounds) {
  std::lock_guard lock(mu_);
  Family& f = family(name, help, MetricType::Histogram, labels);
  if (f.histograms.empty() && f.bounds.empty()) f.bounds = std::move(bounds);
  auto& slot = f.histograms[labels];
  if (!slot) slot = std::make_unique<Histogram>(f.bounds);
  return *slot;
}

void Metrics::add_collector(std::string_view name, std::string_view help, MetricType type, Collector collect) {
  if (type == MetricType::Histogram) throw std::invalid_argument("computed metric " + std::string(name) + ": histograms are not supported");
  std::lock_guard lock(mu_);
  Family& f = family(name, help, type, {});
  if (f.collect || !f.counters.empty() || !f.gauges.empty())
    throw std::invalid_argument("metric " + std::string(name) + " is already registered");
  f.collect = std::move(collect);
}

void Metrics::add_gauge_fn(std::string_view name, std::string_view help, std::function<double()> fn) {
  add_collector(name, help, MetricType::Gauge, [fn = std::move(fn)] { return std::vector<Sample>{{{}, fn()}}; });
}

std::string Metrics::render() const {
  // Snapshot under the lock; run collectors after releasing it.
  struct Out {
    std::string name, help;
    MetricType type;
    std::vector<Sample> samples;
    std::vector<std::pair<Labels, Histogram::Snapshot>> histograms;
    Collector collect;
  };
  std::vector<Out> outs;
  {
    std::lock_guard lock(mu_);
    outs.reserve(families_.size());
    for (const auto& [name, f] : families_) {
      Out o{name, f->help, f->type, {}, {}, f->collect};
      for (const auto& [l, c] : f->counters) o.samples.push_back({l, c->value()});
      for (const auto& [l, g] : f->gauges) o.samples.push_back({l, g->value()});
      for (const auto& [l, h] : f->histograms) o.histograms.emplace_back(l, h->snapshot());
      outs.push_back(std::move(o));
    }
  }

  std::string text;
  for (auto& o : outs) {
    if (o.collect) {
      for (auto& s : o.collect()) {
        bool ok = true;
        for (const auto& [n, v] : s.labels) ok = ok && valid_label_name(n);
        if (ok) o.samples.push_back(std::move(s));
      }
    }
    text += "# HELP " + o.name + " " + escape_help(o.help) + "\n";
    text += "# TYPE " + o.name + " " + std::string(type_name(o.type)) + "\n";
    for (const auto& s : o.samples) text += o.name + render_labels(s.labels) + " " + format_metric_value(s.value) + "\n";
    for (const auto& [labels, h] : o.histograms) {
      for (size_t i = 0; i <= h.bounds.size(); ++i) {
        const std::string le = i < h.bounds.size() ? format_metric_value(h.bounds[i]) : "+Inf";
        text += o.name + "_bucket" + render_labels(labels, "le", le) + " " + std::to_string(h.cumulative[i]) + "\n";
      }
      text += o.name + "_sum" + render_labels(labels) + " " + format_metric_value(h.sum) + "\n";
      text += o.name + "_count" + render_labels(labels) + " " + std::to_string(h.count) + "\n";
    }
  }
  return text;
}

}  // namespace inferd::daemon
