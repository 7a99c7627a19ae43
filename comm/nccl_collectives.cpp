#include "comm/nccl_collectives.hpp"

#include "comm/group_checks.hpp"

#include <cstring>
#include <limits>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include <nccl.h>

#include "comm/tcp_store.hpp"

namespace inferd::comm {

namespace {

using Clock = std::chrono::steady_clock;

std::string nccl_text(ncclResult_t r, ncclComm_t comm) {
  std::string s = ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last && *last) s += std::string(" (") + last + ")";
  return s;
}

void cuda_check(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) throw std::runtime_error(what + ": " + cudaGetErrorString(e));
}

}  // namespace

NcclCollectives::NcclCollectives(NcclOptions options, int generation) : opt_(std::move(options)) {
  check_rank(opt_.rank, opt_.size, "nccl collectives");
  try {
    const std::string dev = "CUDA device " + std::to_string(opt_.device);
    cuda_check(cudaSetDevice(opt_.device), dev);
    cuda_check(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), dev);
    cuda_check(cudaMalloc(&scratch_, sizeof(float)), dev);
  } catch (const std::exception& e) {
    if (done_) cudaEventDestroy(done_);
    throw CollectiveError("nccl collectives on rank " + std::to_string(opt_.rank) + ": " + e.what());
  }
  try {
    connect(generation);
  } catch (...) {
    cudaFree(scratch_);
    cudaEventDestroy(done_);
    throw;
  }
}

// ncclCommAbort, never ncclCommDestroy: that one waits for work that a lost
// peer never finishes. Both free the same resources.
NcclCollectives::~NcclCollectives() {
  if (comm_) ncclCommAbort(comm_);
  cudaFree(scratch_);
  cudaEventDestroy(done_);
}

std::string NcclCollectives::where(const char* op) const {
  return std::string(op) + " on rank " + std::to_string(opt_.rank) + " of " + std::to_string(opt_.size) +
         " (generation " + std::to_string(generation_) + ")";
}

int NcclCollectives::generation() const {
  std::lock_guard lock(mu_);
  return generation_;
}

// Polls until the communicator is ready (event false: creation or a queued
// call in progress) or the op's event has completed (event true); throws on
// the communicator's async error, a CUDA error, abort() or the deadline.
// Spins briefly (most ops take microseconds), then sleeps between polls.
void NcclCollectives::await(ncclComm_t comm, Clock::time_point deadline, bool event) const {
  for (int polls = 0;; ++polls) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess) throw std::runtime_error(nccl_text(r, comm));
    if (state != ncclSuccess && state != ncclInProgress) throw std::runtime_error(nccl_text(state, comm));
    if (!event && state == ncclSuccess) return;
    if (event) {
      const cudaError_t e = cudaEventQuery(done_);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) throw std::runtime_error(std::string("CUDA: ") + cudaGetErrorString(e));
    }
    if (aborted_) throw std::runtime_error("aborted");
    if (Clock::now() >= deadline) throw std::runtime_error("timed out");
    if (polls < 2000)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

void NcclCollectives::connect(int generation) {
  auto store = std::make_shared<TcpStore>(opt_.store_host, opt_.store_port, opt_.rendezvous_timeout);
  ncclComm_t old = nullptr;
  {
    std::lock_guard lock(mu_);
    old = std::exchange(comm_, nullptr);
    generation_ = generation;
    why_.clear();
    aborted_ = false;
    busy_ = true;
    store_ = store;  // abort() interrupts it
  }
  if (old) ncclCommAbort(old);
  ncclComm_t comm = nullptr;
  std::string failure, message;
  try {
    cuda_check(cudaSetDevice(opt_.device), "CUDA device " + std::to_string(opt_.device));
    ncclUniqueId id;
    const std::string key = opt_.prefix + "/" + std::to_string(generation) + "/id";
    if (opt_.rank == 0) {
      const ncclResult_t r = ncclGetUniqueId(&id);
      if (r != ncclSuccess) throw std::runtime_error("ncclGetUniqueId: " + nccl_text(r, nullptr));
      store->set(key, std::vector<char>(id.internal, id.internal + sizeof id.internal));
    } else {
      const std::vector<char> v = store->get(key);
      if (v.size() != sizeof id.internal) throw std::runtime_error("the store's '" + key + "' is not an NCCL id");
      std::memcpy(id.internal, v.data(), v.size());
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const ncclResult_t r = ncclCommInitRankConfig(&comm, opt_.size, id, opt_.rank, &config);
    if (r != ncclSuccess && r != ncclInProgress)
      throw std::runtime_error("ncclCommInitRankConfig: " + nccl_text(r, comm));
    await(comm, Clock::now() + opt_.rendezvous_timeout, false);
  } catch (const std::exception& e) {
    failure = e.what();
  }
  {
    std::lock_guard lock(mu_);
    store_.reset();
    busy_ = false;
    if (why_.empty() && failure.empty()) {
      comm_ = comm;
      return;
    }
    // An abort during the rendezvous names itself; otherwise the failure does.
    const bool aborted = !why_.empty();
    if (!aborted) why_ = "the group did not form: " + failure;
    message = where("forming the group") + ": " + (aborted ? why_ : failure);
  }
  if (comm) ncclCommAbort(comm);
  throw CollectiveError(message);
}

void NcclCollectives::reinit(int generation) { connect(generation); }

void NcclCollectives::abort(const std::string& why) {
  ncclComm_t idle = nullptr;
  std::shared_ptr<TcpStore> store;
  {
    std::lock_guard lock(mu_);
    if (why_.empty()) why_ = "aborted: " + why;
    aborted_ = true;
    if (!busy_) idle = std::exchange(comm_, nullptr);
    store = store_;
  }
  if (store) store->interrupt("aborted: " + why);
  if (idle) ncclCommAbort(idle);
}

// Queues one NCCL call on the stream and, when asked, waits for it. Any
// failure aborts the communicator (the group is unusable until reinit) and
// becomes a CollectiveError naming the op and the rank.
template <class F>
void NcclCollectives::run(const char* op, cudaStream_t stream, bool wait, F&& enqueue) {
  ncclComm_t comm = nullptr;
  {
    std::lock_guard lock(mu_);
    if (!why_.empty()) throw CollectiveError(where(op) + ": " + why_);
    comm = comm_;
    busy_ = true;
  }
  std::string failure;
  try {
    const auto deadline = Clock::now() + opt_.op_timeout;
    cuda_check(cudaSetDevice(opt_.device), "CUDA device " + std::to_string(opt_.device));
    const ncclResult_t r = enqueue(comm, stream);
    if (r != ncclSuccess && r != ncclInProgress) throw std::runtime_error(nccl_text(r, comm));
    if (r == ncclInProgress) await(comm, deadline, false);
    if (wait) {
      cuda_check(cudaEventRecord(done_, stream), "cudaEventRecord");
      await(comm, deadline, true);
    }
  } catch (const std::exception& e) {
    failure = e.what();
  }
  ncclComm_t to_abort = nullptr;
  std::string message;
  {
    std::lock_guard lock(mu_);
    busy_ = false;
    // Aborted while in use: abort() left the communicator to this thread.
    if (failure.empty() && why_.empty()) return;
    to_abort = std::exchange(comm_, nullptr);
    if (failure.empty()) {
      // The op completed before the abort took effect: its result stands.
    } else if (why_.empty()) {
      why_ = std::string(op) + " failed earlier: " + failure;
      message = where(op) + ": " + failure;
    } else {
      message = where(op) + ": " + why_;
    }
  }
  if (to_abort) ncclCommAbort(to_abort);
  if (!message.empty()) throw CollectiveError(message);
}

void NcclCollectives::all_reduce_sum(float* data, size_t n) { reduce(data, n, opt_.stream, true); }

void NcclCollectives::queue_all_reduce_sum(float* data, size_t n, void* queue) {
  reduce(data, n, stream_of(queue), false);
}

void NcclCollectives::reduce(float* data, size_t n, cudaStream_t stream, bool wait) {
  check_count(n, 1, where("all_reduce_sum"));
  if (n > 0 && !data) throw std::invalid_argument(where("all_reduce_sum") + ": null buffer");
  run("all_reduce_sum", stream, wait, [&](ncclComm_t comm, cudaStream_t s) {
    if (n == 0) return ncclSuccess;
    return ncclAllReduce(data, data, n, ncclFloat32, ncclSum, comm, s);
  });
}

void NcclCollectives::all_gather(const float* in, size_t n, float* out) { gather(in, n, out, opt_.stream, true); }

void NcclCollectives::queue_all_gather(const float* in, size_t n, float* out, void* queue) {
  gather(in, n, out, stream_of(queue), false);
}

void NcclCollectives::gather(const float* in, size_t n, float* out, cudaStream_t stream, bool wait) {
  check_count(n, static_cast<size_t>(opt_.size), where("all_gather"));
  if (n > 0 && (!in || !out)) throw std::invalid_argument(where("all_gather") + ": null buffer");
  run("all_gather", stream, wait, [&](ncclComm_t comm, cudaStream_t s) {
    if (n == 0) return ncclSuccess;
    return ncclAllGather(in, out, n, ncclFloat32, comm, s);
  });
}

void NcclCollectives::broadcast(void* data, size_t bytes, int root) {
  if (root < 0 || root >= opt_.size)
    throw std::invalid_argument(where("broadcast") + ": root " + std::to_string(root) + " is not a rank");
  if (bytes > 0 && !data) throw std::invalid_argument(where("broadcast") + ": null buffer");
  run("broadcast", opt_.stream, true, [&](ncclComm_t comm, cudaStream_t stream) {
    if (bytes == 0) return ncclSuccess;
    return ncclBroadcast(data, data, bytes, ncclUint8, root, comm, stream);
  });
}

void NcclCollectives::barrier() {
  run("barrier", opt_.stream, true, [&](ncclComm_t comm, cudaStream_t stream) {
    return ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm, stream);
  });
}

// A queued op's failure shows in the communicator's async error; an abort, in why_.
void NcclCollectives::settle() {
  ncclComm_t to_abort = nullptr;
  std::string message;
  {
    std::lock_guard lock(mu_);
    if (!why_.empty()) throw CollectiveError(where("a queued op") + ": " + why_);
    if (!comm_ || busy_) return;
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
    if (r == ncclSuccess && (state == ncclSuccess || state == ncclInProgress)) return;
    message = nccl_text(r != ncclSuccess ? r : state, comm_);
    why_ = "a queued op failed: " + message;
    to_abort = std::exchange(comm_, nullptr);
  }
  ncclCommAbort(to_abort);
  throw CollectiveError(where("a queued op") + ": " + message);
}

}  // namespace inferd::comm
