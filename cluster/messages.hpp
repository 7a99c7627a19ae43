// The control plane's messages between the head of a tensor-parallel group and
// its workers: one JSON object per frame, {"type": ..., ...}. A frame is a
// 4-byte big-endian length and that many bytes of JSON: plans are small (token
// ids and block tables), and JSON keeps the wire readable in a capture.
#pragma once
#include <boost/json.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/sched/step_plan.hpp"
#include "health/signal.hpp"

namespace inferd::cluster {

constexpr uint32_t kMaxFrameBytes = 64u << 20;  // a plan of 64k tokens is ~1 MiB

// The RDMA fabric (or, with no RDMA device, the socket interface) a rank's
// pre-flight chose (docs/OPERATIONS.md, "Fabric pre-flight"). Empty where there
// is none (one host, no interface on the master's network).
struct FabricChoice {
  std::string interface;
  std::string device;  // "" without RDMA: sockets only
  int port = 0;
  int gid_index = -1;
  int mtu = 0;  // the port's active MTU (the interface's without libibverbs); 0 unknown
  std::string link_layer;
  std::string address;  // this rank's address on the master's network
  bool empty() const { return interface.empty() && device.empty(); }
  // "interface ens1f0np0, mlx5_0 port 1, RoCE v2 GID index 3, address 10.0.0.5, MTU 9000, Ethernet";
  // "interface fab0 (sockets: no RDMA device), address 10.77.0.2"; "none".
  std::string describe() const;
  boost::json::object to_json() const;
  static FabricChoice from_json(const boost::json::object& o);
  bool operator==(const FabricChoice&) const = default;
};

// What every rank of a group must agree on before it may run a step with the
// others: the model file (its size and a hash of its header and tensor table),
// the group's size, and the engine settings that decide step shapes and the KV
// cache. Anything else (threads, ports, log level) may differ.
struct Fingerprint {
  uint64_t model_bytes = 0;
  std::string model_hash;  // FNV-1a 64 of the file's first MiB: header, metadata and tensor table
  int tensor_parallel_size = 1;
  int max_model_len = 0;
  int max_num_batched_tokens = 0;
  int max_num_seqs = 0;
  int block_size = 0;
  uint64_t kv_cache_bytes = 0;
  // Whether each rank sizes its KV cache by its device (gpu_memory_utilization):
  // then the ranks agree on the fewest blocks in a collective all must join.
  bool kv_sized_by_device = false;
  std::string device;
  // The whole choice travels, so each rank's log and the head's status show
  // every rank's; only its link layer and MTU must agree, and only between
  // ranks that both know an MTU (an RDMA port each).
  FabricChoice fabric;

  boost::json::object to_json() const;
  static Fingerprint from_json(const boost::json::object& o);
  // The first difference, worded for both sides' logs ("model: head has ..., rank 1 has ..."); nullopt when equal.
  std::optional<std::string> differs(const Fingerprint& worker, int worker_rank) const;
};

// Reads the model file's identity (size and header hash); throws naming the path.
Fingerprint model_fingerprint(const std::string& model_path);

// A worker's health report, sent with its heartbeat: its monitors that are not
// ok, as [{"monitor", "level", "reason"}].
boost::json::array signals_to_json(const std::vector<health::Signal>& signals);
// Throws std::invalid_argument naming what is wrong.
std::vector<health::Signal> signals_from_json(const boost::json::value& v);

boost::json::object plan_to_json(const engine::StepPlan& plan);
// Throws std::invalid_argument naming the field when a frame is not a plan.
engine::StepPlan plan_from_json(const boost::json::object& o);

}  // namespace inferd::cluster
