#include "comm/gloo_collectives.hpp"

#include "comm/group_checks.hpp"

#include <net/if.h>

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <utility>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include "comm/tcp_store.hpp"

namespace inferd::comm {

namespace {

// How abort wakes a collective that waits on a peer. Gloo has no call for
// it: Context::closeConnections() closes the sockets but leaves a local wait
// asleep until the op's timeout, and UnboundBuffer::abortWaitRecv() reaches
// only buffers we own, not an algorithm's own, whose wait results gloo
// ignores anyway. What works is gloo's own path for an op that times out:
// UnboundBuffer::waitRecv, at its timeout, has the transport context fail
// every pair (Pair::signalExceptionExternal, protected; and Debian's headers
// for tcp::Pair do not compile). Each posted send and recv then gets an
// IoException, so the waiting thread wakes and throws; any later use of a
// pair throws at once; the sockets close, so the peers fail promptly too. A
// fresh buffer that was never posted, waited on for 0 ms, takes exactly that
// path through public calls, safely from any thread (each pair takes its own
// lock). The gap is gloo's own: a transfer already under way with a stalled
// peer is not a posted operation, and ends at the op timeout.
void fail_pairs(gloo::Context& ctx) {
  auto probe = ctx.createUnboundBuffer(nullptr, 0);
  try {
    probe->waitRecv(std::chrono::milliseconds(0));
  } catch (const std::exception&) {
    // the IoException of the timeout path, which is what was wanted
  }
}

}  // namespace

GlooCollectives::GlooCollectives(GlooOptions options, int generation) : opt_(std::move(options)) {
  check_rank(opt_.rank, opt_.size, "gloo collectives");
  // Checked here for a clear message (gloo's own check also leaks a little).
  if (!opt_.iface.empty() && if_nametoindex(opt_.iface.c_str()) == 0)
    throw CollectiveError("gloo collectives on rank " + std::to_string(opt_.rank) + ": no network interface " +
                          opt_.iface);
  gloo::transport::tcp::attr attr;
  if (!opt_.iface.empty())
    attr.iface = opt_.iface;
  else
    attr.hostname = opt_.hostname;
  try {
    device_ = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    throw CollectiveError("gloo collectives on rank " + std::to_string(opt_.rank) + ": cannot listen on " +
                          (opt_.iface.empty() ? "host " + opt_.hostname : "interface " + opt_.iface) + ": " +
                          e.what());
  }
  connect(generation);
}

GlooCollectives::~GlooCollectives() = default;

std::string GlooCollectives::where(const char* op) const {
  return std::string(op) + " on rank " + std::to_string(opt_.rank) + " of " + std::to_string(opt_.size) +
         " (generation " + std::to_string(generation_) + ")";
}

int GlooCollectives::generation() const {
  std::lock_guard lock(mu_);
  return generation_;
}

void GlooCollectives::connect(int generation) {
  auto store = std::make_shared<TcpStore>(opt_.store_host, opt_.store_port, opt_.rendezvous_timeout);
  std::shared_ptr<gloo::Context> old;
  {
    std::lock_guard lock(mu_);
    old = std::move(context_);
    generation_ = generation;
    why_.clear();
    store_ = store;  // abort() interrupts it
  }
  old.reset();  // closes the old connections before the new ones form
  std::string failure;
  auto ctx = std::make_shared<gloo::rendezvous::Context>(opt_.rank, opt_.size);
  try {
    gloo::rendezvous::PrefixStore prefixed(opt_.prefix + "/" + std::to_string(generation), *store);
    ctx->setTimeout(opt_.rendezvous_timeout);
    ctx->connectFullMesh(prefixed, device_);
    ctx->setTimeout(opt_.op_timeout);
  } catch (const std::exception& e) {
    failure = e.what();
  }
  std::lock_guard lock(mu_);
  store_.reset();
  if (why_.empty() && failure.empty()) {
    context_ = std::move(ctx);
    return;
  }
  // An abort during the rendezvous names itself; otherwise the failure does.
  const bool aborted = !why_.empty();
  if (!aborted) why_ = "the group did not form: " + failure;
  throw CollectiveError(where("forming the group") + ": " + (aborted ? why_ : failure));
}

void GlooCollectives::reinit(int generation) { connect(generation); }

void GlooCollectives::abort(const std::string& why) {
  std::shared_ptr<gloo::Context> ctx;
  std::shared_ptr<TcpStore> store;
  {
    std::lock_guard lock(mu_);
    if (why_.empty()) why_ = "aborted: " + why;
    ctx = context_;
    store = store_;
  }
  if (store) store->interrupt("aborted: " + why);
  if (ctx) fail_pairs(*ctx);
}

// Runs one gloo algorithm on the current context. Every exception becomes a
// CollectiveError naming the op and the rank; a failure also fails this
// rank's connections, so the peers stop waiting for it.
template <class F>
void GlooCollectives::run(const char* op, F&& body) {
  std::shared_ptr<gloo::Context> ctx;
  {
    std::lock_guard lock(mu_);
    if (!why_.empty()) throw CollectiveError(where(op) + ": " + why_);
    ctx = context_;
  }
  try {
    body(ctx);
    return;
  } catch (const std::exception& e) {
    std::string why;
    {
      std::lock_guard lock(mu_);
      if (!why_.empty()) throw CollectiveError(where(op) + ": " + why_);  // aborted meanwhile
      why_ = std::string(op) + " failed earlier: " + e.what();
      why = where(op) + ": " + e.what();
    }
    fail_pairs(*ctx);
    throw CollectiveError(why);
  }
}

void GlooCollectives::all_reduce_sum(float* data, size_t n) {
  check_count(n, 1, where("all_reduce_sum"));
  if (n > 0 && !data) throw std::invalid_argument(where("all_reduce_sum") + ": null buffer");
  run("all_reduce_sum", [&](const std::shared_ptr<gloo::Context>& ctx) {
    if (n == 0) return;
    gloo::AllreduceOptions o(ctx);
    o.setOutput(data, n);
    o.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    o.setTimeout(opt_.op_timeout);
    gloo::allreduce(o);
  });
}

void GlooCollectives::all_gather(const float* in, size_t n, float* out) {
  check_count(n, static_cast<size_t>(opt_.size), where("all_gather"));
  if (n > 0 && (!in || !out)) throw std::invalid_argument(where("all_gather") + ": null buffer");
  run("all_gather", [&](const std::shared_ptr<gloo::Context>& ctx) {
    if (n == 0) return;
    gloo::AllgatherOptions o(ctx);
    o.setInput(const_cast<float*>(in), n);  // read only
    o.setOutput(out, n * static_cast<size_t>(opt_.size));
    o.setTimeout(opt_.op_timeout);
    gloo::allgather(o);
  });
}

void GlooCollectives::broadcast(void* data, size_t bytes, int root) {
  if (root < 0 || root >= opt_.size)
    throw std::invalid_argument(where("broadcast") + ": root " + std::to_string(root) + " is not a rank");
  if (bytes > 0 && !data) throw std::invalid_argument(where("broadcast") + ": null buffer");
  run("broadcast", [&](const std::shared_ptr<gloo::Context>& ctx) {
    if (bytes == 0) return;
    gloo::BroadcastOptions o(ctx);
    o.setOutput(static_cast<uint8_t*>(data), bytes);
    o.setRoot(root);
    o.setTimeout(opt_.op_timeout);
    gloo::broadcast(o);
  });
}

void GlooCollectives::barrier() {
  run("barrier", [&](const std::shared_ptr<gloo::Context>& ctx) {
    gloo::BarrierOptions o(ctx);
    o.setTimeout(opt_.op_timeout);
    gloo::barrier(o);
  });
}

}  // namespace inferd::comm
