#include "daemon/engine_host.hpp"

#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "daemon/config.hpp"
#include "warmup/runner.hpp"
#include "daemon/daemon.hpp"
#include "daemon/health_routes.hpp"
#include "daemon/metrics.hpp"
#include "daemon/openai_routes.hpp"
#include "daemon/tensor_parallel_group.hpp"
#include "kernels/backend_factory.hpp"

namespace inferd::daemon {

namespace {

// How far below the HTTP threads the engine's threads run (nice increments).
// On a host with few cores a full load keeps every core busy with steps; at
// the same priority an I/O thread waits its turn behind them, and a health
// check or a stream's next chunk is late by scheduler slices. At +5 a woken I/O
// thread gets the core first; the engine loses only the time the I/O threads
// use, which is small.
constexpr int kEngineNice = 5;

// Threads inherit the nice value of the thread that creates them, so lowering
// the loading thread's priority before the engine is built puts its step loop
// and its compute pool there too.
void lower_priority_of_this_thread(int by) {
  const pid_t tid = static_cast<pid_t>(::gettid());
  errno = 0;
  const int now = ::getpriority(PRIO_PROCESS, static_cast<id_t>(tid));
  if (errno != 0 || ::setpriority(PRIO_PROCESS, static_cast<id_t>(tid), std::min(now + by, 19)) != 0)
    spdlog::warn("engine: cannot lower the priority of its threads: {}", std::strerror(errno));
}

int percent(const engine::LoadProgress& p) {
  return p.bytes_total ? static_cast<int>(p.bytes_done * 100 / p.bytes_total) : 100;
}

// "weights 40% (36/90 MiB, 110/272 tensors)"
std::string describe(const engine::LoadProgress& p) {
  constexpr double kMiB = 1024.0 * 1024.0;
  return fmt::format("{} {}% ({:.0f}/{:.0f} MiB, {}/{} tensors)", p.stage, percent(p), p.bytes_done / kMiB,
                     p.bytes_total / kMiB, p.tensors_done, p.tensors_total);
}

}  // namespace

engine::EngineOptions engine_options(const Config& cfg) {
  engine::EngineOptions o;
  o.model_path = cfg.model.path;
  o.chat_template_path = cfg.model.chat_template;
  o.threads = cfg.engine.threads;
  o.backend = [device = cfg.engine.device, threads = cfg.engine.threads] { return kernels::make_backend(device, threads); };
  o.max_model_len = static_cast<int>(cfg.model.max_model_len);
  o.max_num_seqs = cfg.engine.max_num_seqs;
  o.max_num_batched_tokens = cfg.engine.max_num_batched_tokens;
  o.max_waiting = static_cast<size_t>(cfg.engine.max_waiting);
  o.block_size = cfg.engine.block_size;
  o.enable_prefix_caching = cfg.engine.enable_prefix_caching;
  // On a GPU the KV cache is sized by the device's memory; the CPU keeps kv_cache_bytes.
  if (cfg.engine.device != "cpu") o.gpu_memory_utilization = cfg.engine.gpu_memory_utilization;
  o.graph_sizes = cfg.engine.enforce_eager ? std::vector<int>{} : cfg.engine.cuda_graph_sizes;
  if (const auto& sc = cfg.engine.speculative; sc.num_speculative_tokens > 0) {
    o.speculative = engine::NgramOptions{sc.num_speculative_tokens, sc.prompt_lookup_min, sc.prompt_lookup_max};
    (sc.method == "draft_head" ? o.draft_head : o.draft_model) = sc.model;
  }
  return o;
}

EngineHost::EngineHost(Daemon& daemon) {
  Metrics& m = daemon.metrics();
  load_progress_ = &m.gauge("inferd_load_progress", "Share of the model's weight bytes loaded, 0 to 1.");
  load_bytes_ = &m.gauge("inferd_load_bytes", "Bytes of the model's weights loaded so far.");
  weights_bytes_ = &m.gauge("inferd_model_weights_bytes", "Bytes of the model's weights: the load's total.");
  load_seconds_ = &m.gauge("inferd_load_seconds", "Seconds the model load took; set when it ends.");
  daemon.set_load_hook([this](Daemon& d) { load(d); });
  // Each rank of a tensor-parallel group, as the head sees it (nothing for a single rank).
  auto per_rank = [this](auto field, int first_rank = 0) {
    return [this, field, first_rank] {
      std::vector<Metrics::Sample> out;
      if (const HeadGroup* g = group_ptr_.load())
        for (const auto& r : g->control().ranks())
          if (r.rank >= first_rank) out.push_back({{{"rank", std::to_string(r.rank)}}, field(r)});
      return out;
    };
  };
  m.add_collector("inferd_tp_rank_joined", "1 for each rank of the tensor-parallel group that is connected.",
                  MetricType::Gauge, per_rank([](const cluster::RankState& r) { return r.joined ? 1.0 : 0.0; }));
  m.add_collector("inferd_tp_rank_steps_total", "Steps each worker rank reports it has run.", MetricType::Counter,
                  per_rank([](const cluster::RankState& r) { return static_cast<double>(r.steps); }, 1));
  // Each rank's fabric choice as the head heard it (docs/OPERATIONS.md, "Fabric
  // pre-flight"); `inferctl status` shows it beside the rank.
  m.add_collector("inferd_tp_rank_fabric", "1 for each rank of the tensor-parallel group, labelled with its fabric choice.",
                  MetricType::Gauge, [this] {
                    std::vector<Metrics::Sample> out;
                    if (const HeadGroup* g = group_ptr_.load())
                      for (const auto& r : g->control().ranks())
                        out.push_back({{{"rank", std::to_string(r.rank)}, {"choice", r.fabric.describe()}}, 1.0});
                    return out;
                  });
  auto head_timing = [this](auto field) {
    return [this, field] {
      const HeadGroup* g = group_ptr_.load();
      return g ? std::vector<Metrics::Sample>{{{}, field(g->timing())}} : std::vector<Metrics::Sample>{};
    };
  };
  m.add_collector("inferd_tp_collective_seconds_total",
                  "Seconds the head's rank spent in collectives (all-reduce, all-gather), waiting for peers included; "
                  "on GPU ranks only those the host waits in (a step's run on the device, uncounted).",
                  MetricType::Counter, head_timing([](const comm::TimedCollectives& t) { return t.seconds(); }));
  m.add_collector("inferd_tp_collectives_total",
                  "Collectives the head's rank has called and waited in (a GPU rank's step's collectives run on the "
                  "device, uncounted).",
                  MetricType::Counter, head_timing([](const comm::TimedCollectives& t) { return static_cast<double>(t.calls()); }));
  m.add_collector("inferd_tp_rank_heard_seconds", "Seconds since each worker rank's last control-plane message.",
                  MetricType::Gauge, per_rank([](const cluster::RankState& r) { return r.heard_ago_s; }, 1));
  if (HttpServer* http = daemon.http())
    daemon.set_in_flight_ender(register_openai_routes(
        *http, daemon.lifecycle(), daemon.metrics(), [this] { return engine(); },
        {.served_model_name = daemon.config().model_name(),
         .api_key = daemon.config().server.api_key,
         .tool_call_parser = daemon.config().server.tool_call_parser,
         .reasoning_parser = daemon.config().server.reasoning_parser}));
}

std::vector<health::Signal> EngineHost::group_signals() const {
  const HeadGroup* g = group_ptr_.load();
  if (!g) return {};
  const auto trouble = g->trouble();
  std::vector<health::Signal> out{{"group", trouble ? health::Level::Critical : health::Level::Ok, trouble.value_or("")}};
  // The head supervises the whole group: a rank under pressure slows every
  // step, and an error on one rank's transport breaks the data plane for all.
  for (const auto& r : g->control().ranks()) {
    if (r.rank == 0) continue;
    health::Signal s{"rank" + std::to_string(r.rank), health::Level::Ok, ""};
    for (const auto& m : r.health) {
      s.level = health::worst(s.level, m.level);
      s.reason += (s.reason.empty() ? "" : "; ") + m.monitor + ": " + m.reason;
    }
    out.push_back(std::move(s));
  }
  return out;
}

void EngineHost::begin_rank_coverage() {
  if (HeadGroup* g = group_ptr_.load()) g->control().order_coverage(/*reset=*/true);
}

std::optional<std::string> EngineHost::rank_coverage_failure() {
  HeadGroup* g = group_ptr_.load();
  if (!g) return std::nullopt;
  const uint64_t round = g->control().order_coverage(/*reset=*/false);
  try {
    for (const auto& c : g->control().wait_coverage(round, std::chrono::seconds(30))) {
      spdlog::info("warm-up coverage on rank {}: {} of {} reachable shape keys touched", c.rank, c.covered, c.total);
      if (c.covered < c.total)
        return fmt::format("rank {}: {}", c.rank, warmup::uncovered_text(c.total - c.covered, c.total, c.missing));
    }
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return std::nullopt;
}

EngineHost::~EngineHost() {
  // A step waiting in a collective for a worker that has gone must return.
  if (group_) group_->collectives().abort("the head is stopping");
  if (auto e = engine()) e->stop();
}

void EngineHost::load(Daemon& d) {
  const Config& cfg = d.config();
  lower_priority_of_this_thread(kEngineNice);
  spdlog::info("loading {}", cfg.model.path);
  const auto start = std::chrono::steady_clock::now();
  engine::EngineOptions opts = engine_options(cfg);
  // The activity (systemd's STATUS=, /health/ready) moves once per stage and 10 %
  // step, no more often, so even a fast load sends the same handful of messages.
  using Step = std::pair<std::string_view, int>;  // stage, tens of percent
  opts.on_load_progress = [this, &d, shown = Step()](const engine::LoadProgress& p) mutable {
    load_bytes_->set(static_cast<double>(p.bytes_done));
    weights_bytes_->set(static_cast<double>(p.bytes_total));
    load_progress_->set(p.bytes_total ? static_cast<double>(p.bytes_done) / p.bytes_total : 1.0);
    const Step step{p.stage, percent(p) / 10};
    if (step == shown) return;
    shown = step;
    d.lifecycle().set_activity(describe(p));
  };
  if (const int n = cfg.engine.tensor_parallel_size; n > 1) {
    // The head is rank 0: its workers join and the data plane forms before the
    // load, so every rank loads its share at once.
    // A worker that leaves breaks the group: a step waiting on it returns at
    // once, and the supervisor's "group" monitor calls for a recovery, whose
    // reset re-forms the group once the worker's restart has rejoined. A
    // stalled worker (its connection open) is a wedge recovered the same way.
    group_ = std::make_unique<HeadGroup>(
        cfg, [&d](const std::string& s) { d.lifecycle().set_activity(s); }, [&d] { return d.stopping(); },
        [this](int rank, const std::string& why) {
          if (auto* g = group_ptr_.load()) g->collectives().abort("worker rank " + std::to_string(rank) + " left: " + why);
        });
    group_ptr_ = group_.get();
    opts.tp = {0, n, &group_->collectives()};
    opts.on_plan = [&control = group_->control()](const engine::StepPlan& plan) { control.send_plan(plan); };
    opts.reform_group = [g = group_.get()](const std::string& why) { g->reform(why); };
  }
  auto eng = std::make_shared<engine::Engine>(opts, &d.heartbeat());
  if (group_) {
    // Plans may only go out once every worker can run them.
    group_->control().wait_for_workers(
        true, std::chrono::minutes(60), [&d](const std::string& s) { d.lifecycle().set_activity(s); },
        [&d] { return d.stopping(); });
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  load_seconds_->set(seconds);
  spdlog::info("model loaded in {:.2f} s", seconds);
  d.set_drive_heartbeat(false);
  d.served_model().set({.id = cfg.model_name(),
                        .root = cfg.model.path,
                        .max_model_len = eng->max_model_len(),
                        .created = static_cast<int64_t>(std::time(nullptr))});
  std::lock_guard lk(engine_mu_);
  engine_ = std::move(eng);
}

}  // namespace inferd::daemon
