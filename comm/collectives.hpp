// The data plane of a tensor-parallel group: the collectives every rank of a
// step calls in the same order. One interface, two implementations: Gloo over
// TCP for CPU ranks (comm/gloo_collectives.hpp) and NCCL for GPU ranks
// (comm/nccl_collectives.hpp). The control plane (rendezvous, plans, heartbeats)
// is separate and keeps working while a collective here is wedged.
//
// Threads: one thread at a time calls the collectives and reinit() (the
// rank's step thread); abort() may come from any thread.
#pragma once
#include <cstddef>
#include <stdexcept>
#include <string>

namespace inferd::comm {

// Thrown by a collective that was aborted (from another thread), timed out, or
// lost a peer. The group is unusable until reinit() succeeds.
class CollectiveError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // In place: data[i] becomes the sum over ranks of data[i]. `data` is in the
  // memory space of the rank's backend (host for Gloo, device for NCCL).
  virtual void all_reduce_sum(float* data, size_t n) = 0;
  // out (size() * n floats) gets every rank's `in` (n floats), in rank order.
  virtual void all_gather(const float* in, size_t n, float* out) = 0;
  // Root's `bytes` at data reach every rank's data.
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  virtual void barrier() = 0;
  // From any thread, at any time: every collective blocked now or called later
  // on this rank throws CollectiveError promptly, until reinit().
  virtual void abort(const std::string& why) = 0;
  // Re-forms the group (every rank calls it, after an abort or a lost peer):
  // new connections under a new generation, so stale traffic never mixes in.
  virtual void reinit(int generation) = 0;
  // The generation formed last: ops queued on a device (below) belong to it.
  virtual int generation() const = 0;

  // all_reduce_sum and all_gather queued on `queue`, a device stream (the
  // rank's backend's, after the kernels that wrote the data), returning without
  // waiting for them, so a backend may capture them in a graph with its
  // kernels. Their result is there at the next wait on the queue; their
  // failure, or an abort meanwhile, at settle(). A host data plane (Gloo)
  // takes a null queue and runs them as the ops above.
  virtual void queue_all_reduce_sum(float* data, size_t n, void* queue) {
    host_only(queue, "queue_all_reduce_sum");
    all_reduce_sum(data, n);
  }
  virtual void queue_all_gather(const float* in, size_t n, float* out, void* queue) {
    host_only(queue, "queue_all_gather");
    all_gather(in, n, out);
  }
  // After a step that queued ops has waited for its queue: throws
  // CollectiveError when one of them failed or the group was aborted since.
  virtual void settle() {}

 private:
  static void host_only(void* queue, const char* op) {
    if (queue) throw std::logic_error(std::string(op) + ": this data plane runs on the host, not on a device queue");
  }
};

}  // namespace inferd::comm
