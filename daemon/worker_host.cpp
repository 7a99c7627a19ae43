#include "daemon/worker_host.hpp"

#include <spdlog/spdlog.h>

#include "daemon/daemon.hpp"
#include "daemon/engine_host.hpp"
#include "engine/step_heartbeat.hpp"

namespace inferd::daemon {

WorkerHost::WorkerHost(Daemon& daemon) {
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
  group_ = std::make_unique<WorkerGroup>(cfg, [&d] { return d.stopping(); });
  d.lifecycle().set_activity("loading this rank's share of the model");
  engine::EngineOptions opts = engine_options(cfg);
  opts.tp = {cfg.parallel.node_rank, cfg.engine.tensor_parallel_size, group_->collectives.get()};
  rank_ = std::make_unique<engine::RankWorker>(opts);
  rank_->set_cancel_flag(&cancel_);
  d.set_drive_heartbeat(false);
  group_->control->ready();
  thread_ = std::thread([this, &d] { run(d); });
}

void WorkerHost::run(Daemon& d) {
  while (auto plan = group_->control->next_plan()) {
    d.heartbeat().begin_step(plan->work());
    try {
      rank_->execute(*plan);
    } catch (const std::exception& e) {
      d.heartbeat().end_step();
      if (cancel_) return;
      d.fail(std::string("worker step failed: ") + e.what());
      return;
    }
    d.heartbeat().end_step();
    group_->control->finished_step();
  }
  if (!cancel_ && !d.stopping()) d.fail(group_->control->why());
}

}  // namespace inferd::daemon
