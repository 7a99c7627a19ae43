#include "daemon/supervisor_report.hpp"

#include <algorithm>
#include <chrono>

#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <spdlog/spdlog.h>

#include "daemon/admin_routes.hpp"
#include "daemon/http_server.hpp"
#include "daemon/json_error.hpp"
#include "daemon/metrics.hpp"

namespace inferd::daemon {

namespace {

namespace json = boost::json;
using namespace std::chrono;

double level_value(health::Level l) { return static_cast<double>(static_cast<int>(l)); }

double unix_seconds(system_clock::time_point t) {
  return duration_cast<milliseconds>(t.time_since_epoch()).count() / 1000.0;
}

// inferd_psi_percent{resource, kind, window}: every value of one pressure file.
void export_pressure(Metrics& m, const std::string& resource, const health::PsiResource& r) {
  if (!r.available) return;
  auto set = [&](const char* kind, const health::PsiLine& l) {
    for (auto [window, value] : {std::pair{"avg10", l.avg10}, {"avg60", l.avg60}, {"avg300", l.avg300}})
      m.gauge("inferd_psi_percent", "Pressure stall: share of time tasks stalled on a resource (%)",
              {{"resource", resource}, {"kind", kind}, {"window", window}})
          .set(value);
  };
  set("some", r.some);
  if (r.full) set("full", *r.full);
}

// Per GPU the gpu monitor watches, labelled with its CUDA index.
void export_gpus(Metrics& m, const health::GpuObservation& o) {
  for (const auto& g : o.gpus) {
    const Labels gpu{{"gpu", std::to_string(g.gpu)}};
    m.gauge("inferd_gpu_up", "1 when NVML answered for the GPU at the last sample, 0 when not", gpu)
        .set(g.readable ? 1 : 0);
    if (!g.readable) continue;
    m.gauge("inferd_gpu_memory_used_bytes", "GPU memory in use (all processes), as NVML reads it", gpu)
        .set(double(g.memory_used));
    m.gauge("inferd_gpu_memory_total_bytes", "GPU memory in all, as NVML reads it", gpu).set(double(g.memory_total));
    if (g.temperature_c)
      m.gauge("inferd_gpu_temperature_celsius", "GPU core temperature", gpu).set(double(*g.temperature_c));
    auto ecc = [&](const char* type, const std::optional<uint64_t>& v) {
      if (v)
        m.gauge("inferd_gpu_ecc_errors", "Volatile ECC error count (since the driver loaded), as NVML reads it",
                {{"gpu", std::to_string(g.gpu)}, {"type", type}})
            .set(double(*v));
    };
    ecc("corrected", g.ecc_corrected);
    ecc("uncorrected", g.ecc_uncorrected);
    if (g.clock_reasons)
      for (const auto& [bit, name] : health::clock_reason_names())
        m.gauge("inferd_gpu_clock_event_reason", "1 while NVML names this reason for the GPU's clocks, 0 when not",
                {{"gpu", std::to_string(g.gpu)}, {"reason", std::string(name)}})
            .set(*g.clock_reasons & bit ? 1 : 0);
  }
}

}  // namespace

MonitorReport::MonitorReport(Metrics& m, const HealthSampler& sampler) : metrics_(m) {
  level_ = &m.gauge("inferd_health_level", "Worst monitor level now: 0 ok, 1 warn, 2 shed, 3 critical");
  m.add_collector("inferd_monitor_samples_total", "Samples each monitor has taken", MetricType::Counter, [&sampler] {
    std::vector<Metrics::Sample> out;
    for (const auto& c : sampler.sample_counts()) out.push_back({{{"monitor", c.monitor}}, double(c.samples)});
    return out;
  });
  m.add_collector("inferd_log_lines_total", "Error lines seen on stderr by category, before and after the baseline",
                  MetricType::Counter, [&sampler] {
                    std::vector<Metrics::Sample> out;
                    for (const auto& c : sampler.log_counts()) {
                      out.push_back({{{"category", c.category}, {"baseline", "before"}}, double(c.before_baseline)});
                      out.push_back({{{"category", c.category}, {"baseline", "after"}}, double(c.after_baseline)});
                    }
                    return out;
                  });
  m.add_collector("inferd_gpu_xid_events_total", "Xid critical error events NVML reported, by GPU and Xid",
                  MetricType::Counter, [&sampler] {
                    std::vector<Metrics::Sample> out;
                    for (const auto& [key, n] : sampler.gpu_xid_counts())
                      out.push_back({{{"gpu", std::to_string(key.first)}, {"xid", std::to_string(key.second)}}, double(n)});
                    return out;
                  });
}

void MonitorReport::record(const MonitorSample& s) {
  using health::Level;
  Metrics& m = metrics_;
  Level top = Level::Ok;
  std::string levels;
  for (const auto& sig : s.signals) {
    top = health::worst(top, sig.level);
    m.gauge("inferd_monitor_level", "Each monitor's level now: 0 ok, 1 warn, 2 shed, 3 critical", {{"monitor", sig.monitor}})
        .set(level_value(sig.level));
    if (sig.level != Level::Ok) levels += fmt::format(" {}={} ({})", sig.monitor, health::level_name(sig.level), sig.reason);
  }
  level_->set(level_value(top));
  const auto& mem = s.mem;
  if (mem.available) {
    m.gauge("inferd_mem_available_bytes", "MemAvailable as the supervisor last read it").set(double(mem.mem_available));
    m.gauge("inferd_mem_shed_floor_bytes", "MemAvailable below which the supervisor sheds").set(double(mem.shed_floor));
    m.gauge("inferd_swap_used_bytes", "SwapTotal - SwapFree").set(double(mem.swap_total - std::min(mem.swap_free, mem.swap_total)));
  }
  const auto& proc = s.proc;
  if (proc.available) {
    m.gauge("inferd_process_rss_bytes", "Resident set size").set(double(proc.rss_bytes));
    m.gauge("inferd_process_threads", "Threads of the process").set(double(proc.threads));
    if (proc.open_fds) m.gauge("inferd_process_open_fds", "Open file descriptors").set(double(*proc.open_fds));
  }
  for (const auto& p : s.fabric.ports) {
    const std::string port = std::to_string(p.port);
    m.gauge("inferd_fabric_port_active", "RDMA port state: 1 ACTIVE, 0 not", {{"device", p.device}, {"port", port}})
        .set(p.active ? 1 : 0);
    for (const auto& [counter, value] : p.errors)
      m.gauge("inferd_fabric_port_errors", "RDMA port error counter as sysfs reads it",
              {{"device", p.device}, {"port", port}, {"counter", counter}})
          .set(double(value));
  }
  for (const auto& d : s.fabric.deltas) {
    const Labels l{{"device", d.device}, {"port", std::to_string(d.port)}, {"counter", d.counter}};
    m.gauge("inferd_fabric_port_errors_since_baseline", "RDMA port error counter's increase since the warm-up baseline", l)
        .set(double(d.since_baseline));
    m.gauge("inferd_fabric_port_errors_per_second",
            "RDMA port error counter's growth per second over the last sampling interval (what [fabric] *_warn_per_s bound)", l)
        .set(d.per_second);
  }
  export_gpus(m, s.gpu);
  export_pressure(m, "memory", s.psi.memory);
  export_pressure(m, "cpu", s.psi.cpu);
  export_pressure(m, "io", s.psi.io);
  if (levels != last_levels_) {
    if (levels.empty()) spdlog::info("supervisor: every monitor ok");
    else spdlog::warn("supervisor: monitors:{}", levels);
    last_levels_ = levels;
  }
  std::lock_guard lk(mu_);
  last_signals_ = s.signals;
}

std::vector<health::Signal> MonitorReport::last_signals() const {
  std::lock_guard lk(mu_);
  return last_signals_;
}

std::string supervisor_json(const SupervisorStatus& s) {
  json::array monitors;
  for (const auto& sig : s.monitors)
    monitors.push_back(json::object{{"monitor", sig.monitor}, {"level", health::level_name(sig.level)}, {"reason", sig.reason}});
  json::array decisions;
  for (const auto& r : s.decisions) {
    json::array names;
    for (const auto& m : r.decision.monitors) names.push_back(json::string(m));
    decisions.push_back(json::object{{"id", r.id},
                                     {"at", unix_seconds(r.at)},
                                     {"action", health::action_name(r.decision.action)},
                                     {"level", health::level_name(r.decision.level)},
                                     {"monitors", std::move(names)},
                                     {"reason", r.decision.reason},
                                     {"outcome", r.outcome}});
  }
  return json::serialize(json::object{{"enabled", s.enabled},
                                      {"state", to_string(s.state)},
                                      {"recoveries_in_window", s.budget.recoveries_in_window},
                                      {"max_recoveries", s.budget.max_recoveries},
                                      {"recovery_window_s", s.budget.window.count()},
                                      {"monitors", std::move(monitors)},
                                      {"decisions", std::move(decisions)}});
}

std::string probe_json(const health::ProbeResult& r) {
  json::object o{{"ok", r.ran && r.ok}, {"ran", r.ran}, {"text", r.text}, {"seconds", r.seconds},
                 {"reason", r.ran ? r.reason : std::string("no generation probe has run yet")}};
  if (r.ran) o["at"] = unix_seconds(r.at);
  return json::serialize(o);
}

void register_supervisor_routes(HttpServer& http, const std::string& admin_key, SupervisorRoutes routes) {
  auto last_probe = [last = routes.last_probe](const Request&) {
    const auto r = last();
    return Response::json(r.ran && r.ok ? 200 : 503, probe_json(r));
  };
  const RouteOptions health{.listeners = Listeners::Both};
  http.route("GET", "/health/generate", last_probe, health);
  http.route("GET", "/health_generate", last_probe, health);  // SGLang's name
  route_admin(http, "POST", "/admin/probe", admin_key, [probe_now = routes.probe_now](const Request&) {
    const auto r = probe_now();
    if (!r) throw HttpError(503, "no generation probe unless inferd is Serving or Degraded");
    return Response::json(r->ok ? 200 : 503, probe_json(*r));
  });
  route_admin(http, "GET", "/admin/supervisor", admin_key, [status = routes.status](const Request&) {
    return Response::json(200, supervisor_json(status()));
  });
}

}  // namespace inferd::daemon
