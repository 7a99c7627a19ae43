// The daemon's part in a tensor-parallel group (one rank per process): what the
// ranks must agree on, the head's side (control plane, rendezvous store and data
// plane, formed before its engine loads) and a worker's side (joining the head,
// then the data plane). Ports: the control plane on master_port, the
// rendezvous store of the data plane on master_port + 1.
#pragma once
#include <chrono>
#include <functional>
#include <optional>
#include <memory>
#include <string>

#include "cluster/control_head.hpp"
#include "cluster/control_worker.hpp"
#include "comm/collectives.hpp"
#include "comm/timed_collectives.hpp"

namespace inferd::comm {
class StoreServer;
}

namespace inferd::daemon {

struct Config;

cluster::Fingerprint group_fingerprint(const Config& cfg);

// What the head holds while it serves: workers' control connections, the store
// they met through and the data plane.
class HeadGroup {
 public:
  // Listens, waits for every worker to join (`status` hears who has), then forms
  // the data plane with them. Throws std::runtime_error saying what is missing.
  // `lost` hears a worker that leaves after it joined; `cancelled` (the daemon
  // stopping) also ends a re-forming's wait for a rejoin.
  HeadGroup(const Config& cfg, const std::function<void(const std::string&)>& status,
            std::function<bool()> cancelled, std::function<void(int rank, const std::string& why)> lost);
  // Critical when a worker has left or gone silent (the supervisor's "group" monitor).
  std::optional<std::string> trouble() const;
  ~HeadGroup();

  cluster::ControlHead& control() { return *control_; }
  const cluster::ControlHead& control() const { return *control_; }
  comm::Collectives& collectives() { return *collectives_; }
  const comm::TimedCollectives& timing() const { return *collectives_; }
  // After an abort: every rank re-forms the data plane under the next
  // generation (the workers are told over the control plane), a worker that
  // left having rejoined first (a restarted one: within a minute). Blocks until
  // all have; throws std::runtime_error (or comm::CollectiveError) when one cannot.
  void reform(const std::string& why);

 private:
  int generation_ = 0;
  std::function<bool()> cancelled_;
  std::unique_ptr<cluster::ControlHead> control_;
  std::unique_ptr<comm::StoreServer> store_;
  std::unique_ptr<comm::TimedCollectives> collectives_;
};

// A worker's: joins the head (refused: cluster::Refused with the head's reason),
// then forms the data plane from the address it reached the head from.
struct WorkerGroup {
  // `on_reform` hears the head's order to re-form, and `health` is asked for
  // this rank's health report at each heartbeat, both on the control plane's thread.
  WorkerGroup(const Config& cfg, const std::function<bool()>& cancelled, std::function<void(int)> on_reform,
              std::function<std::vector<health::Signal>()> health);
  // After the head has gone: joins its restart (the model stays loaded) and
  // re-forms the data plane at the generation its first order names.
  void rejoin(const std::function<bool()>& cancelled);
  std::unique_ptr<cluster::ControlWorker> control;
  std::unique_ptr<comm::Collectives> collectives;
};

}  // namespace inferd::daemon
