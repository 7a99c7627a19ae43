// A headless worker rank in the daemon: at Loading it joins the head and the
// data plane and loads its share of the model; once Serving it runs the head's
// step plans, in order, on its own thread. When the head goes it keeps its
// share of the model and joins the head's restart. Its health monitors report
// to the head with each heartbeat. It serves no API: only /health/* and
// /metrics (and the admin routes) on its own port. A step that the head's
// order to re-form cannot abort (Gloo cannot wake a transfer already under way
// when the group broke) fails the process, so that it restarts and rejoins.
#pragma once
#include <atomic>
#include <boost/asio/steady_timer.hpp>
#include <memory>
#include <thread>
#include <vector>

#include "daemon/tensor_parallel_group.hpp"
#include "daemon/worker_health.hpp"
#include "engine/rank_worker.hpp"

namespace inferd::daemon {

class Daemon;

class WorkerHost {
 public:
  // Throws when MemAvailable is below [health] min_available_bytes.
  explicit WorkerHost(Daemon& daemon);
  ~WorkerHost();

  // See HealthSampler::restore_stderr.
  void restore_stderr() { health_.restore_stderr(); }

 private:
  void load(Daemon& d);
  void run(Daemon& d);
  // Runs the head's orders until it goes (true) or this rank fails or stops (false).
  bool run_orders(Daemon& d);
  void report_coverage(const cluster::Order& order);
  // On the control plane's thread, at the head's order to re-form: the step in
  // progress, if any, must end within kAbortGrace, or this rank fails.
  void must_leave_step(Daemon& d, int generation);

  WorkerHealth health_;
  std::unique_ptr<WorkerGroup> group_;
  std::atomic<comm::Collectives*> collectives_{nullptr};  // set once joined; read by the control plane's thread
  std::unique_ptr<engine::RankWorker> rank_;
  std::vector<kernels::ShapeKey> reachable_;  // what this rank's warm-up must touch
  std::atomic<bool> cancel_{false};
  std::unique_ptr<boost::asio::steady_timer> abort_timer_;  // on the daemon's loop
  std::thread thread_;
};

}  // namespace inferd::daemon
