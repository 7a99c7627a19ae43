#include "daemon/worker_host.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon/daemon.hpp"
#include "daemon/engine_host.hpp"
#include "engine/step_heartbeat.hpp"
#include "faults/fault_points.hpp"
#include "kernels/shape_registry.hpp"
#include "warmup/runner.hpp"

namespace inferd::daemon {

namespace {

// An aborted collective returns within milliseconds; this leaves room for a
// fully loaded machine. The head waits a minute for a restarted rank.
constexpr std::chrono::seconds kAbortGrace{10};

}  // namespace

WorkerHost::WorkerHost(Daemon& daemon) : health_(daemon) {
  daemon.set_load_hook([this](Daemon& d) { load(d); });
}

WorkerHost::~WorkerHost() {
  cancel_ = true;
  if (group_) group_->control->stop();
  if (group_) group_->collectives->abort("the worker is stopping");
  if (thread_.joinable()) thread_.join();
}

void WorkerHost::load(Daemon& d) {
  const Config& cfg = d.config();
  d.lifecycle().set_activity("joining the head at " + cfg.parallel.master_addr + ":" +
                             std::to_string(cfg.parallel.master_port));
  group_ = std::make_unique<WorkerGroup>(
      cfg, [&d] { return d.stopping(); },
      [this, &d](int generation) {
        health_.clear();
        // A collective this rank is blocked in returns, so the loop reaches the order.
        if (auto* c = collectives_.load())
          c->abort("the head re-forms the group as generation " + std::to_string(generation));
        must_leave_step(d, generation);
      },
      [this] { return health_.report(); });
  collectives_ = group_->collectives.get();
  d.lifecycle().set_activity("loading this rank's share of the model");
  engine::EngineOptions opts = engine_options(cfg);
  opts.tp = {cfg.parallel.node_rank, cfg.engine.tensor_parallel_size, group_->collectives.get()};
  rank_ = std::make_unique<engine::RankWorker>(opts);
  rank_->set_cancel_flag(&cancel_);
  reachable_ = rank_->reachable_shape_keys();
  d.set_drive_heartbeat(false);
  group_->control->ready();
  thread_ = std::thread([this, &d] { run(d); });
}

void WorkerHost::run(Daemon& d) {
  const auto cancelled = [this, &d] { return cancel_.load() || d.stopping(); };
  for (;;) {
    if (!run_orders(d)) return;
    if (cancelled()) return;
    // The head has gone (restarted, say): this rank keeps its share of the
    // model and joins the head's restart, as the group's restart would.
    spdlog::warn("tensor parallel: {}; rejoining", group_->control->why());
    d.lifecycle().set_activity("rejoining the head");
    try {
      group_->rejoin(cancelled);
      group_->control->ready();
      d.lifecycle().set_activity("");
    } catch (const std::exception& e) {
      if (!cancelled()) d.fail(std::string("rejoining the head failed: ") + e.what());
      return;
    }
  }
}

// The head's warm-up opens its gate only once every rank has touched every
// shape key its own steps can reach: a rank's shapes differ from the head's
// (its share of the heads and columns), and a shape first met while serving
// stalls the whole group in a collective.
void WorkerHost::report_coverage(const cluster::Order& order) {
  if (order.coverage == "reset") {
    kernels::ShapeRegistry::global().clear();
    return;
  }
  // Fault point "rank.shapes_untouched": this rank's steps count as having
  // touched nothing, as a rank that missed the warm-up would.
  static const faults::FaultPoint untouched("rank.shapes_untouched");
  if (untouched.armed()) kernels::ShapeRegistry::global().clear();
  const warmup::Coverage c = warmup::measure_coverage(reachable_);
  std::vector<std::string> missing;
  for (size_t i = 0; i < c.missing.size() && i < 8; ++i) missing.push_back(c.missing[i].str());
  group_->control->report_coverage(order.round, c.total, c.covered, missing);
  spdlog::info("warm-up coverage on this rank: {} of {} reachable shape keys touched", c.covered, c.total);
}

bool WorkerHost::run_orders(Daemon& d) {
  while (auto order = group_->control->next()) {
    if (!order->coverage.empty()) {
      report_coverage(*order);
      continue;
    }
    if (order->reform >= 0) {
      try {
        group_->collectives->reinit(order->reform);
        spdlog::info("tensor parallel: rank {} is in generation {}", d.config().parallel.node_rank, order->reform);
      } catch (const std::exception& e) {
        if (cancel_) return false;
        d.fail(std::string("re-forming the group failed: ") + e.what());
        return false;
      }
      continue;
    }
    d.heartbeat().begin_step(order->plan.work());
    try {
      rank_->execute(order->plan);
    } catch (const comm::CollectiveError& e) {
      // The group broke under this step (the head aborted it, or a peer went):
      // the head's order to re-form follows, or its connection closes.
      spdlog::warn("worker step aborted: {}", e.what());
    } catch (const std::exception& e) {
      d.heartbeat().end_step();
      if (cancel_) return false;
      d.fail(std::string("worker step failed: ") + e.what());
      return false;
    }
    d.heartbeat().end_step();
    group_->control->finished_step();
  }
  return true;
}

void WorkerHost::must_leave_step(Daemon& d, int generation) {
  // The step heartbeat knows the step in progress: the one that ends as the
  // count of completed steps moves on.
  const engine::StepHeartbeat& beat = d.heartbeat();
  if (beat.idle()) return;
  const uint64_t step = beat.steps_completed();
  boost::asio::post(d.supervisor_loop(), [this, &d, step, generation] {
    abort_timer_ = std::make_unique<boost::asio::steady_timer>(d.supervisor_loop(), kAbortGrace);
    abort_timer_->async_wait([this, &d, step, generation](auto ec) {
      if (ec || d.heartbeat().idle() || d.heartbeat().steps_completed() != step || cancel_) return;
      d.fail(fmt::format("this rank's step did not end within {} s of the head's order to re-form as generation {} "
                         "(a transfer under way when the group broke cannot be aborted); restarting this rank "
                         "to rejoin",
                         kAbortGrace.count(), generation));
    });
  });
}

}  // namespace inferd::daemon
