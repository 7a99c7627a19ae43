// The head's end of the control plane: it listens on the master address,
// admits each worker rank that says hello with a matching fingerprint (and
// refuses the others, saying why on both sides), sends every step plan to all
// of them in order, and hears their heartbeats. It runs on its own thread, so
// it keeps answering while the engine is stuck in a collective.
#pragma once
#include <boost/asio.hpp>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cluster/messages.hpp"

namespace inferd::cluster {

class Connection;

struct HeadOptions {
  std::string address = "127.0.0.1";
  uint16_t port = 29500;
  int world_size = 2;
  Fingerprint fingerprint;
  // A worker that had joined has gone (its control connection closed); called
  // on the control plane's thread.
  std::function<void(int rank, const std::string& why)> on_rank_lost{};
};

// What the head knows of one worker rank.
struct RankState {
  int rank = 0;
  bool joined = false;
  bool ready = false;      // its share of the model is loaded: it can run plans
  std::string peer;        // its control connection's address:port
  std::string address;     // where it reaches the head from (its data-plane address)
  uint64_t steps = 0;      // plans it has finished, from its last heartbeat
  double heard_ago_s = 0;  // since its last frame
  // Its monitors that are not ok, from its last heartbeat in the group's
  // current generation (a report from before a re-forming is dropped).
  std::vector<health::Signal> health;
  // Its fabric pre-flight's choice, from its hello (the head's own for rank 0).
  FabricChoice fabric;
};

// A worker's answer to a coverage order: what its steps touched of the shape
// keys they can reach, since the last reset.
struct RankCoverage {
  int rank = 0;
  uint64_t round = 0;
  size_t total = 0;
  size_t covered = 0;
  std::vector<std::string> missing;  // the first few keys not touched
};

class ControlHead {
 public:
  // Binds and listens (std::runtime_error naming the address when it cannot).
  explicit ControlHead(HeadOptions opts);
  ~ControlHead();
  ControlHead(const ControlHead&) = delete;
  ControlHead& operator=(const ControlHead&) = delete;

  // Blocks until every worker rank has joined (or, with `loaded`, has also
  // loaded its share). `on_status` hears progress ("2 of 3 ranks joined;
  // waiting for rank 2"); throws std::runtime_error naming the missing ranks
  // after `timeout`, or as soon as `cancelled` returns true.
  void wait_for_workers(bool loaded, std::chrono::milliseconds timeout,
                        const std::function<void(const std::string&)>& on_status, const std::function<bool()>& cancelled);
  // To every joined worker, in the order called (from the engine's thread).
  void send_plan(const engine::StepPlan& plan);
  // Orders every worker to form the data plane as `generation`: the first
  // order a worker gets after joining, and after an abort the order to re-form
  // (each aborts what it is blocked in first). Workers' health reports start
  // afresh. Throws std::runtime_error naming
  // a worker rank that is not connected: it could never join.
  void send_reform(int generation);
  // What is wrong with the group, if anything: a worker has left since the
  // group last formed (even if it has rejoined: the data plane is still
  // broken), or one is silent for longer than `silence` (stopped, or cut off).
  std::optional<std::string> trouble(std::chrono::milliseconds silence) const;
  // Around a warm-up (from the thread that runs it): `reset` has every worker
  // count touched shape keys afresh; otherwise each is asked for its count,
  // after the plans sent before this order. Returns the order's round.
  uint64_t order_coverage(bool reset);
  // Every worker's answer to round `round`; throws std::runtime_error naming
  // the ranks that did not answer within `timeout`.
  std::vector<RankCoverage> wait_coverage(uint64_t round, std::chrono::milliseconds timeout);
  std::vector<RankState> ranks() const;
  // The port it listens on (the one asked for, or the one chosen for port 0).
  uint16_t port() const { return acceptor_.local_endpoint().port(); }

 private:
  void accept();
  void on_message(const std::shared_ptr<Connection>& c, const boost::json::object& m);
  void on_close(const std::shared_ptr<Connection>& c, const std::string& why);

  HeadOptions opts_;
  boost::asio::io_context io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::thread thread_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  struct Slot {
    RankState state;
    std::shared_ptr<Connection> conn;
    std::chrono::steady_clock::time_point heard;
    RankCoverage coverage;  // its last answer
  };
  std::string broken_;  // why the group broke since it last formed: a worker left
  int generation_ = -1;  // the last send_reform's
  uint64_t coverage_round_ = 0;
  std::vector<Slot> slots_;  // index = rank; slot 0 is the head itself
};

}  // namespace inferd::cluster
