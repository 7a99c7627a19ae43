// Collectives for CPU ranks: Gloo's algorithms over its TCP transport. The
// group meets through a StoreServer (comm/tcp_store.hpp); each generation's
// keys live under "<prefix>/<generation>".
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "comm/collectives.hpp"

namespace gloo {
class Context;
namespace transport {
class Device;
}
}  // namespace gloo

namespace inferd::comm {

class TcpStore;

struct GlooOptions {
  int rank = 0;
  int size = 1;
  // The group's StoreServer (the head's master address).
  std::string store_host = "127.0.0.1";
  uint16_t store_port = 0;
  std::string prefix = "gloo";  // store keys: "<prefix>/<generation>/..."
  // Where this rank's connections listen: a network interface (e.g. "eth0")
  // when set, else `hostname` (a name or an address). Ranks may live in
  // different network namespaces, so each names its own.
  std::string iface;
  std::string hostname = "127.0.0.1";
  // Forming the group: reaching the store and every rank publishing its
  // address. (Gloo itself allows a connection up to five times this.)
  std::chrono::milliseconds rendezvous_timeout{30000};
  // One collective, end to end: a peer silent for this long fails it.
  std::chrono::milliseconds op_timeout{30000};
};

class GlooCollectives final : public Collectives {
 public:
  // Forms generation `generation` of the group: blocks until every rank has
  // joined, or throws CollectiveError.
  explicit GlooCollectives(GlooOptions options, int generation = 0);
  ~GlooCollectives() override;

  int rank() const override { return opt_.rank; }
  int size() const override { return opt_.size; }
  void all_reduce_sum(float* data, size_t n) override;
  void all_gather(const float* in, size_t n, float* out) override;
  void broadcast(void* data, size_t bytes, int root) override;
  void barrier() override;
  // Also interrupts a reinit() waiting on the store.
  void abort(const std::string& why) override;
  void reinit(int generation) override;

  int generation() const override;

 private:
  template <class F>
  void run(const char* op, F&& body);
  std::string where(const char* op) const;
  void connect(int generation);

  const GlooOptions opt_;
  std::shared_ptr<gloo::transport::Device> device_;
  mutable std::mutex mu_;  // guards the members below (abort comes from any thread)
  std::shared_ptr<gloo::Context> context_;
  std::shared_ptr<TcpStore> store_;  // only while a rendezvous is in progress
  int generation_ = 0;
  std::string why_;  // why the group is unusable (an abort, a failed op); empty while usable
};

}  // namespace inferd::comm
