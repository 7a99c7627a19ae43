#include "daemon/warmup_host.hpp"

#include <spdlog/spdlog.h>

#include <chrono>

#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include "daemon/admin_routes.hpp"
#include "daemon/daemon.hpp"
#include "daemon/engine_host.hpp"
#include "daemon/http_server.hpp"
#include "daemon/json_error.hpp"

namespace inferd::daemon {

namespace {

warmup::PlanLimits limits_of(const engine::Engine& eng) {
  const auto& o = eng.options();
  return {.max_model_len = eng.max_model_len(), .max_num_seqs = o.max_num_seqs,
          .max_num_batched_tokens = o.max_num_batched_tokens};
}

}  // namespace

WarmupHost::WarmupHost(Daemon& daemon, EngineHost& engines) : daemon_(daemon), engines_(engines) {
  Metrics& m = daemon.metrics();
  cold_ = &m.counter("inferd_cold_shapes_total", "Shape keys first used after the warm-up gate opened");
  daemon.set_warm_hook([this](Daemon& d) { warm(d, warmup::start_depth(d.config().warmup)); });
  HttpServer* http = daemon.http();
  if (http == nullptr) return;
  const std::string& admin_key = daemon.config().server.admin_api_key;
  route_admin(*http, "GET", "/admin/warmup", admin_key, [this](const Request&) {
    return Response::json(200, report_json());
  });
  route_admin(*http, "POST", "/admin/warmup", admin_key, [this](const Request&) {
    if (daemon_.lifecycle().state() != State::Serving || rerunning_.exchange(true))
      throw HttpError(409, "a warm-up can be re-run only while Serving (now " +
                               std::string(to_string(daemon_.lifecycle().state())) + ")");
    if (rerun_.joinable()) rerun_.join();
    rerun_ = std::thread([this] { rewarm(daemon_); });
    return Response::json(202, R"({"state":"Warming"})");
  });
}

WarmupHost::~WarmupHost() {
  if (rerun_.joinable()) rerun_.join();
}

void WarmupHost::warm(Daemon& d, warmup::Depth depth) {
  auto eng = engines_.engine();
  if (!eng) throw std::runtime_error("warm-up: no engine was loaded");
  const warmup::WarmupOptions& opts = d.config().warmup;
  auto& shapes = kernels::ShapeRegistry::global();
  auto seal = [&] {
    shapes.seal([this](const kernels::ShapeKey& key) {
      cold_->inc();
      spdlog::warn("cold shape: {} first used after the warm-up gate opened", key.str());
    });
  };
  if (!opts.enable) {
    spdlog::warn("warm-up disabled ([warmup] enable = false): the endpoint opens on unexercised kernels");
    seal();
    return;
  }
  shapes.unseal();

  const auto axes = eng->shape_axes();
  const auto limits = limits_of(*eng);
  const auto reachable = eng->reachable_shape_keys();
  warmup::Plan plan;
  auto make_plan = [&](warmup::Depth dep) {
    plan = warmup::make_plan(axes, limits, opts, dep);
    const auto unreached = warmup::unreached_buckets(plan, axes, limits);
    {
      std::lock_guard lk(mu_);
      plan_text_ = warmup::describe(plan);
      unreached_ = unreached;
    }
    spdlog::info("warm-up plan ({} work): {} reachable shape keys, {} requests in {} phases\n{}",
                 dep == warmup::Depth::least ? "least" : "full", reachable.size(), plan.total_requests(),
                 plan.phases.size(), warmup::describe(plan));
    for (const auto& u : unreached) spdlog::warn("warm-up plan cannot be sure to reach {}", u);
  };
  make_plan(depth);

  std::string shown;
  auto progress = [&](int phase, const std::string& name, int done, int total) {
    std::string text = fmt::format("warming {}/{} {} {}/{} requests", phase + 1, plan.phases.size(), name, done, total);
    if (text == shown) return;
    shown = text;
    d.lifecycle().set_activity(std::move(text));
  };
  for (int attempt = 0;; ++attempt) {
    engines_.begin_rank_coverage();
    warmup::Report report = warmup::run_plan(*eng, plan, reachable, opts, progress, [&] { return d.stopping(); });
    // Every rank of a group must have touched its own shapes, not only the head.
    if (report.passed())
      if (auto why = engines_.rank_coverage_failure()) report.failure = *why;
    publish(report);
    if (report.passed()) {
      spdlog::info("warm-up passed: {}", warmup::summarize(report));
      d.metrics().counter("inferd_warmup_runs_total", "Warm-up runs by result", {{"result", "passed"}}).inc();
      seal();
      return;
    }
    d.metrics().counter("inferd_warmup_runs_total", "Warm-up runs by result", {{"result", "failed"}}).inc();
    spdlog::error("warm-up attempt {} of {} failed: {} ({})", attempt + 1, opts.retries + 1, report.failure,
                  warmup::summarize(report));
    if (attempt >= opts.retries || d.stopping())
      throw std::runtime_error("warm-up failed after " + std::to_string(attempt + 1) + " attempts: " + report.failure);
    d.lifecycle().set_activity(fmt::format("warm-up failed ({}), retry {} of {}", report.failure, attempt + 1, opts.retries));
    if (depth != warmup::Depth::full) make_plan(depth = warmup::Depth::full);
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(opts.retry_delay_s);
    while (std::chrono::steady_clock::now() < until && !d.stopping())
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void WarmupHost::rewarm(Daemon& d) {
  struct Done {
    std::atomic<bool>& flag;
    ~Done() { flag = false; }
  } done{rerunning_};
  if (!d.lifecycle().transition(State::Recovering, "warm-up requested by an operator")) return;
  if (!d.lifecycle().transition(State::Warming, "re-running the warm-up")) return;
  try {
    warm(d, warmup::start_depth(d.config().warmup));
    d.lifecycle().transition(State::Serving, "warm-up passed");
  } catch (const std::exception& e) {
    if (!d.stopping()) d.fail(e.what());
  }
}

void WarmupHost::publish(const warmup::Report& r) {
  Metrics& m = daemon_.metrics();
  for (const auto& ph : r.phases)
    m.gauge("inferd_warmup_phase_seconds", "Wall time of each phase of the last warm-up run", {{"phase", ph.name}})
        .set(ph.seconds);
  m.gauge("inferd_warmup_seconds", "Wall time of the last warm-up run").set(r.seconds);
  m.gauge("inferd_warmup_graph_capture_seconds",
          "Of the last warm-up's wall time, the first recording of each captured decode step size (CUDA graphs)")
      .set(r.capture_seconds);
  m.gauge("inferd_warmup_keys_total", "Shape keys real traffic can reach under this configuration")
      .set(static_cast<double>(r.keys_total));
  m.gauge("inferd_warmup_keys_covered", "Reachable shape keys touched by the time the last warm-up ended")
      .set(static_cast<double>(r.keys_covered));
  for (const auto& [key, s] : r.slowest)
    m.gauge("inferd_shape_first_use_seconds", "Cost of the first use of the slowest shape keys", {{"key", key.str()}})
        .set(s);
  std::lock_guard lk(mu_);
  last_ = r;
  have_report_ = true;
}

std::string WarmupHost::report_json() const {
  namespace json = boost::json;
  std::lock_guard lk(mu_);
  json::object o{{"plan", plan_text_}};
  json::array unreached;
  for (const auto& u : unreached_) unreached.push_back(json::value(u));
  o["unreached"] = std::move(unreached);
  o["cold_shapes"] = cold_->value();
  if (have_report_) {
    json::array phases;
    for (const auto& ph : last_.phases)
      phases.push_back(json::object{{"name", ph.name}, {"requests", ph.requests}, {"completed", ph.completed},
                                    {"seconds", ph.seconds}, {"error", ph.error}});
    json::array missing;
    for (const auto& k : last_.missing) missing.push_back(json::value(k.str()));
    o["last_run"] = json::object{{"passed", last_.passed()}, {"failure", last_.failure}, {"seconds", last_.seconds},
                                 {"keys_total", last_.keys_total}, {"keys_covered", last_.keys_covered},
                                 {"missing", std::move(missing)}, {"phases", std::move(phases)}};
  }
  return json::serialize(o);
}

}  // namespace inferd::daemon
