#include "daemon/tensor_parallel_group.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "comm/timed_collectives.hpp"
#include "daemon/config.hpp"
#include "daemon/engine_host.hpp"
#include "daemon/fabric_preflight.hpp"
#include "inferd_config.h"
#include "kernels/backend_factory.hpp"
#if INFERD_HAVE_GLOO
#include "comm/gloo_collectives.hpp"
#include "comm/tcp_store.hpp"
#if INFERD_HAVE_NCCL
#include "comm/nccl_collectives.hpp"
#endif
#else
namespace inferd::comm {
class StoreServer {};  // never made without Gloo; complete so HeadGroup can hold one
}  // namespace inferd::comm
#endif

namespace inferd::daemon {

namespace {

// Long enough for every rank to load its share; a wedge is found by the step
// deadlines and heartbeats, not by waiting this long.
constexpr std::chrono::minutes kJoinTimeout{60};
constexpr std::chrono::seconds kOpTimeout{300};
// A recovery waits this long for a worker that left to rejoin: a worker whose
// step could not be aborted restarts (docs/OPERATIONS.md, "Tensor parallel"),
// and joins before it loads its share.
constexpr std::chrono::seconds kRejoin{60};
// Workers beat every 0.5 s on the control plane, which runs on its own thread
// whatever their engine does: 5 s of silence is a stopped or cut-off rank.
constexpr std::chrono::seconds kSilence{5};

// Where a rank meets its group, for either data plane: its rank, the group's
// size, the head's rendezvous store, and how long one collective may take.
template <class Options>
Options meeting(const Config& cfg, int rank) {
  Options o;
  o.rank = rank;
  o.size = cfg.engine.tensor_parallel_size;
  o.store_host = cfg.parallel.master_addr;
  o.store_port = static_cast<uint16_t>(cfg.parallel.master_port + 1);
  o.op_timeout = kOpTimeout;
  return o;
}

// The data plane: NCCL between GPU ranks (each its own device, named by its
// engine.device), Gloo over TCP between CPU ranks; both meet at the head's
// rendezvous store. Config refuses tensor_parallel_size > 1 in a build without
// Gloo, and on a GPU without NCCL, so the throwing branches are never reached
// from the daemon.
std::unique_ptr<comm::Collectives> data_plane(const Config& cfg, int rank, const std::string& address,
                                              int generation) {
  if (const auto device = kernels::cuda_device_index(cfg.engine.device)) {
#if INFERD_HAVE_GLOO && INFERD_HAVE_NCCL
    auto o = meeting<comm::NcclOptions>(cfg, rank);
    o.device = *device;
    o.rendezvous_timeout = kJoinTimeout;
    return std::make_unique<comm::NcclCollectives>(o, generation);
#else
    throw std::runtime_error("this build has no NCCL: GPU ranks cannot form a data plane");
#endif
  }
#if INFERD_HAVE_GLOO
  auto o = meeting<comm::GlooOptions>(cfg, rank);
  o.hostname = address;
  return std::make_unique<comm::GlooCollectives>(o, generation);
#else
  throw std::runtime_error("this build has no Gloo: CPU ranks cannot form a data plane");
#endif
}

std::unique_ptr<comm::StoreServer> rendezvous_store(const Config& cfg) {
#if INFERD_HAVE_GLOO
  return std::make_unique<comm::StoreServer>(cfg.parallel.master_addr,
                                             static_cast<uint16_t>(cfg.parallel.master_port + 1));
#else
  throw std::runtime_error("this build has no Gloo: no rendezvous store");
#endif
}

// The head's first order to a worker names the generation to form: 0 for a new
// group, a later one for a worker that rejoins a group re-forming.
int first_order(cluster::ControlWorker& control) {
  const auto first = control.next();
  if (!first || first->reform < 0)
    throw std::runtime_error("the head sent no order to form the data plane: " + control.why());
  return first->reform;
}

}  // namespace

cluster::Fingerprint group_fingerprint(const Config& cfg) {
  cluster::Fingerprint f = cluster::model_fingerprint(cfg.model.path);
  const engine::EngineOptions o = engine_options(cfg);
  f.tensor_parallel_size = cfg.engine.tensor_parallel_size;
  f.max_model_len = o.max_model_len;
  f.max_num_batched_tokens = o.max_num_batched_tokens;
  f.max_num_seqs = o.max_num_seqs;
  f.block_size = o.block_size;
  f.kv_cache_bytes = o.kv_cache_bytes;
  f.kv_sized_by_device = o.gpu_memory_utilization > 0 && o.num_kv_blocks <= 0;
  // The kind of device, not its index: two GPU ranks on one host use two devices.
  f.device = kernels::cuda_device_index(cfg.engine.device) ? "cuda" : cfg.engine.device;
  f.fabric = fabric_identity(cfg);
  return f;
}

HeadGroup::HeadGroup(const Config& cfg, const std::function<void(const std::string&)>& status,
                     std::function<bool()> cancelled, std::function<void(int, const std::string&)> lost)
    : cancelled_(std::move(cancelled)) {
  const auto& p = cfg.parallel;
  control_ = std::make_unique<cluster::ControlHead>(
      cluster::HeadOptions{p.master_addr, static_cast<uint16_t>(p.master_port), cfg.engine.tensor_parallel_size,
                           group_fingerprint(cfg), std::move(lost)});
  store_ = rendezvous_store(cfg);
  control_->wait_for_workers(false, kJoinTimeout, status, cancelled_);
  status("forming the data plane");
  control_->send_reform(generation_);
  collectives_ = std::make_unique<comm::TimedCollectives>(data_plane(cfg, 0, p.master_addr, generation_));
  spdlog::info("tensor parallel: a group of {} formed ({})", cfg.engine.tensor_parallel_size,
               kernels::cuda_device_index(cfg.engine.device) ? "NCCL" : "Gloo over TCP");
}

HeadGroup::~HeadGroup() {
  // The control plane's thread hears workers leave and calls `lost`, which
  // aborts the collectives: it is joined before they are freed (a worker that
  // closed its connection while the head stopped read freed memory: ASan).
  control_.reset();
}

std::optional<std::string> HeadGroup::trouble() const { return control_->trouble(kSilence); }

void HeadGroup::reform(const std::string& why) {
  const auto until = std::chrono::steady_clock::now() + kRejoin;
  std::string last = why;
  for (;;) {
    ++generation_;
    spdlog::warn("tensor parallel: re-forming the group as generation {} ({})", generation_, last);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      throw std::runtime_error(fmt::format("the group did not re-form within {} s: {}", kRejoin.count(), last));
    control_->wait_for_workers(false, left, {}, cancelled_);
    control_->send_reform(generation_);
    try {
      collectives_->reinit(generation_);
      break;
    } catch (const comm::CollectiveError& e) {
      // A worker that left while the group formed (one whose step could not be
      // aborted restarts) is waited for again; any other failure is final.
      const auto trouble = control_->trouble(kSilence);
      if (!trouble) throw;
      last = *trouble + "; " + e.what();
    }
  }
  spdlog::info("tensor parallel: generation {} formed", generation_);
}

WorkerGroup::WorkerGroup(const Config& cfg, const std::function<bool()>& cancelled, std::function<void(int)> on_reform,
                         std::function<std::vector<health::Signal>()> health) {
  const auto& p = cfg.parallel;
  cluster::WorkerOptions o{.master_addr = p.master_addr,
                           .master_port = static_cast<uint16_t>(p.master_port),
                           .rank = p.node_rank,
                           .fingerprint = group_fingerprint(cfg),
                           .on_reform = std::move(on_reform),
                           .health = std::move(health)};
  control = std::make_unique<cluster::ControlWorker>(std::move(o));
  const std::string address = control->join(kJoinTimeout, cancelled);
  spdlog::info("tensor parallel: rank {} of {} joined the head at {}:{} (from {})", p.node_rank,
               cfg.engine.tensor_parallel_size, p.master_addr, p.master_port, address);
  const int generation = first_order(*control);
  collectives = data_plane(cfg, p.node_rank, address, generation);
  spdlog::info("tensor parallel: rank {} is in generation {}", p.node_rank, generation);
}

void WorkerGroup::rejoin(const std::function<bool()>& cancelled) {
  control->join(kJoinTimeout, cancelled);
  const int generation = first_order(*control);
  collectives->reinit(generation);
  spdlog::info("tensor parallel: rejoined; this rank is in generation {}", generation);
}

}  // namespace inferd::daemon
