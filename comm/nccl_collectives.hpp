// Collectives for GPU ranks: NCCL, one communicator per generation. The
// communicator is non-blocking (ncclConfig_t::blocking = 0), so no NCCL call
// waits on a peer: every op that waits does so here, polling the
// communicator's async error, its deadline and abort(). A queued op (the
// forward pass's, on the backend's stream) is waited for by whoever waits on
// that stream; a peer that never joins it is the supervisor's to find (a
// wedged step), whose abort() ends it. Rank 0 publishes NCCL's unique id
// through the group's StoreServer under "<prefix>/<generation>/id".
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include <cuda_runtime_api.h>

#include "comm/collectives.hpp"

struct ncclComm;  // nccl.h: typedef struct ncclComm* ncclComm_t

namespace inferd::comm {

class TcpStore;

struct NcclOptions {
  int rank = 0;
  int size = 1;
  int device = 0;  // this rank's CUDA device; each call makes it the thread's current one
  // Ops are queued on this stream, after the work already on it (the kernels
  // that wrote the data); each returns once its result is in device memory.
  cudaStream_t stream = nullptr;
  std::string store_host = "127.0.0.1";
  uint16_t store_port = 0;
  std::string prefix = "nccl";
  std::chrono::milliseconds rendezvous_timeout{30000};  // id exchange and communicator creation
  std::chrono::milliseconds op_timeout{30000};          // one collective, end to end
};

class NcclCollectives final : public Collectives {
 public:
  // Forms generation `generation` of the group: blocks until every rank has
  // joined, or throws CollectiveError.
  explicit NcclCollectives(NcclOptions options, int generation = 0);
  ~NcclCollectives() override;

  int rank() const override { return opt_.rank; }
  int size() const override { return opt_.size; }
  void all_reduce_sum(float* data, size_t n) override;
  void all_gather(const float* in, size_t n, float* out) override;
  void broadcast(void* data, size_t bytes, int root) override;
  void barrier() override;  // an all-reduce of one float: NCCL has no barrier
  // Aborts the communicator (ncclCommAbort) at once when no op is using it;
  // otherwise the op's polling loop aborts it within a poll (NCCL allows no
  // concurrent calls on a communicator). Also interrupts a reinit().
  void abort(const std::string& why) override;
  void reinit(int generation) override;
  int generation() const override;
  // Queued on `queue` (a cudaStream_t; null: the options' stream) without
  // waiting: NCCL allows capturing them in a CUDA graph.
  void queue_all_reduce_sum(float* data, size_t n, void* queue) override;
  void queue_all_gather(const float* in, size_t n, float* out, void* queue) override;
  void settle() override;

 private:
  void reduce(float* data, size_t n, cudaStream_t stream, bool wait);
  void gather(const float* in, size_t n, float* out, cudaStream_t stream, bool wait);
  cudaStream_t stream_of(void* queue) const { return queue ? static_cast<cudaStream_t>(queue) : opt_.stream; }
  // Queues one NCCL call on `stream`, then waits for it unless `wait` is false.
  template <class F>
  void run(const char* op, cudaStream_t stream, bool wait, F&& enqueue);
  void await(ncclComm* comm, std::chrono::steady_clock::time_point deadline, bool event) const;
  std::string where(const char* op) const;
  void connect(int generation);

  const NcclOptions opt_;
  cudaEvent_t done_ = nullptr;  // recorded after each op
  float* scratch_ = nullptr;    // the barrier's float, on the device
  std::atomic<bool> aborted_{false};
  mutable std::mutex mu_;  // guards the members below (abort comes from any thread)
  ncclComm* comm_ = nullptr;
  bool busy_ = false;  // an op or reinit is using the communicator
  std::shared_ptr<TcpStore> store_;
  int generation_ = 0;
  std::string why_;  // why the group is unusable; empty while usable
};

}  // namespace inferd::comm
