// A worker rank's end of the control plane: it connects to the head (retrying
// while the head is not up yet), says hello with its rank and fingerprint, and
// then hands the head's step plans to the rank's loop in order, with a
// heartbeat every half second carrying how many plans it has finished, the
// generation it is in and its health report.
#pragma once
#include <boost/asio.hpp>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cluster/messages.hpp"

namespace inferd::cluster {

class Connection;

// The head said no; what() is its reason.
class Refused : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct WorkerOptions {
  std::string master_addr = "127.0.0.1";
  uint16_t master_port = 29500;
  int rank = 1;
  Fingerprint fingerprint;
  std::chrono::milliseconds heartbeat_interval{500};
  // The head is re-forming the group: called on the control plane's thread as
  // the order arrives, so the rank can abort a collective it is blocked in.
  std::function<void(int generation)> on_reform{};
  // This rank's monitors that are not ok, for each heartbeat (called on the
  // control plane's thread); none when unset.
  std::function<std::vector<health::Signal>()> health{};
};

// What the head asks of a worker next: run a plan, re-form the group's data
// plane under a new generation (plans sent before it are dropped), or, around
// a warm-up, start counting the shape keys its steps touch afresh ("reset") or
// report what they touched ("report", answered with report_coverage).
struct Order {
  engine::StepPlan plan;
  int reform = -1;        // the generation to re-form as; -1: not a re-forming
  std::string coverage;   // "reset" or "report"; empty: not about coverage
  uint64_t round = 0;     // the coverage report's number, echoed back
  bool is_plan() const { return reform < 0 && coverage.empty(); }
};

class ControlWorker {
 public:
  explicit ControlWorker(WorkerOptions opts);
  ~ControlWorker();
  ControlWorker(const ControlWorker&) = delete;
  ControlWorker& operator=(const ControlWorker&) = delete;

  // Connects and is welcomed; returns this host's address as the head sees it
  // reached (where the data plane should bind). Throws Refused with the head's
  // reason, or std::runtime_error after `timeout` / once `cancelled` is true or
  // stop() was called. Called again after the head has gone, it joins afresh
  // (a restarted head), dropping what the old connection had brought.
  std::string join(std::chrono::milliseconds timeout, const std::function<bool()>& cancelled);
  // The next order, blocking; nullopt once the head has gone (why(): the
  // reason) or stop() was called.
  std::optional<Order> next();
  // Tells the head this rank's share of the model is loaded.
  void ready();
  void finished_step() { ++steps_; }
  // Answers the head's coverage order `round`: the reachable shape keys this
  // rank's steps touched since the last "reset" (`missing`: the first few not).
  void report_coverage(uint64_t round, size_t total, size_t covered, const std::vector<std::string>& missing);
  void stop();
  std::string why() const;

 private:
  void on_message(boost::json::object m);
  void on_close(const std::string& why);
  void beat();
  bool current(const std::shared_ptr<Connection>& c) const;  // messages of a replaced connection are ignored

  WorkerOptions opts_;
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  boost::asio::steady_timer heartbeat_;
  std::thread thread_;
  std::shared_ptr<Connection> conn_;
  std::atomic<uint64_t> steps_{0};
  int generation_ = -1;  // the last the head ordered
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool welcomed_ = false;
  bool gone_ = false;
  bool stopped_ = false;
  std::string why_;
  std::deque<Order> orders_;
};

}  // namespace inferd::cluster
