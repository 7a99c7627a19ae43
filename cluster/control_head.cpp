#include "cluster/control_head.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <optional>

#include "cluster/connection.hpp"

namespace inferd::cluster {

namespace asio = boost::asio;
namespace json = boost::json;
using Clock = std::chrono::steady_clock;

ControlHead::ControlHead(HeadOptions opts) : opts_(std::move(opts)), acceptor_(io_), slots_(opts_.world_size) {
  boost::system::error_code ec;
  const auto addr = asio::ip::make_address(opts_.address, ec);
  if (ec) throw std::runtime_error(fmt::format("control plane: master_addr '{}' is not an IP address", opts_.address));
  const asio::ip::tcp::endpoint ep(addr, opts_.port);
  acceptor_.open(ep.protocol());
  acceptor_.set_option(asio::socket_base::reuse_address(true));
  acceptor_.bind(ep, ec);
  if (ec) throw std::runtime_error(fmt::format("control plane: cannot listen on {}:{}: {}", opts_.address, opts_.port, ec.message()));
  acceptor_.listen();
  for (int r = 0; r < opts_.world_size; ++r) slots_[r].state.rank = r;
  slots_[0].state.joined = slots_[0].state.ready = true;
  slots_[0].state.fabric = opts_.fingerprint.fabric;
  accept();
  thread_ = std::thread([this] { io_.run(); });
  spdlog::info("control plane: listening on {}:{} for {} worker rank(s)", opts_.address, opts_.port,
               opts_.world_size - 1);
}

ControlHead::~ControlHead() {
  asio::post(io_, [this] {
    boost::system::error_code ec;
    acceptor_.close(ec);
    for (auto& s : slots_)
      if (s.conn) s.conn->close();
  });
  io_.stop();
  if (thread_.joinable()) thread_.join();
}

void ControlHead::accept() {
  acceptor_.async_accept([this](auto ec, asio::ip::tcp::socket socket) {
    if (ec) return;  // closed
    auto c = std::make_shared<Connection>(std::move(socket));
    c->start([this](const std::shared_ptr<Connection>& c, json::object m) { on_message(c, m); },
             [this](const std::shared_ptr<Connection>& c, const std::string& why) { on_close(c, why); });
    accept();
  });
}

void ControlHead::on_message(const std::shared_ptr<Connection>& c, const json::object& m) {
  const auto* type = m.if_contains("type");
  const std::string t = type && type->is_string() ? std::string(type->as_string()) : "";
  std::lock_guard lk(mu_);
  if (t == "hello") {
    auto refuse = [&](const std::string& why) {
      spdlog::error("control plane: refused {}: {}", c->peer(), why);
      c->send({{"type", "refuse"}, {"reason", why}});
    };
    int rank = -1;
    Fingerprint theirs;
    try {
      rank = json::value_to<int>(m.at("rank"));
      theirs = Fingerprint::from_json(m.at("fingerprint").as_object());
    } catch (const std::exception& e) {
      return refuse(std::string("a malformed hello: ") + e.what());
    }
    if (rank < 1 || rank >= opts_.world_size)
      return refuse(fmt::format("rank {} is outside this group of {} (workers are ranks 1 to {})", rank,
                                opts_.world_size, opts_.world_size - 1));
    if (auto d = opts_.fingerprint.differs(theirs, rank)) return refuse(*d);
    Slot& s = slots_[rank];
    if (s.state.joined && s.conn && s.conn != c) return refuse(fmt::format("rank {} has already joined from {}", rank, s.state.peer));
    if (!s.state.peer.empty()) spdlog::info("control plane: rank {} rejoins", rank);
    s.conn = c;
    s.state.joined = true;
    s.state.peer = c->peer();
    s.state.address = c->peer_address();
    s.state.fabric = theirs.fabric;
    s.heard = Clock::now();
    c->send({{"type", "welcome"}, {"rank", rank}, {"world_size", opts_.world_size}});
    if (theirs.fabric.empty()) spdlog::info("control plane: rank {} joined from {}", rank, s.state.peer);
    else spdlog::info("control plane: rank {} joined from {}; its fabric: {}", rank, s.state.peer, theirs.fabric.describe());
    cv_.notify_all();
    return;
  }
  for (auto& s : slots_) {
    if (s.conn != c) continue;
    s.heard = Clock::now();
    if (t == "heartbeat") {
      if (const auto* steps = m.if_contains("steps")) s.state.steps = json::value_to<uint64_t>(*steps);
      const auto* gen = m.if_contains("generation");
      const auto* health = m.if_contains("health");
      if (health && gen && gen->is_int64() && gen->as_int64() >= generation_) {
        try {
          s.state.health = signals_from_json(*health);
        } catch (const std::invalid_argument& e) {
          spdlog::error("control plane: rank {}'s heartbeat: {}", s.state.rank, e.what());
        }
      }
    } else if (t == "coverage") {
      try {
        RankCoverage rc{s.state.rank, json::value_to<uint64_t>(m.at("round")), json::value_to<size_t>(m.at("total")),
                        json::value_to<size_t>(m.at("covered")),
                        json::value_to<std::vector<std::string>>(m.at("missing"))};
        s.coverage = std::move(rc);
        cv_.notify_all();
      } catch (const std::exception& e) {
        spdlog::error("control plane: rank {}'s coverage report: {}", s.state.rank, e.what());
      }
    } else if (t == "ready") {
      s.state.ready = true;
      spdlog::info("control plane: rank {} has loaded its share of the model", s.state.rank);
      cv_.notify_all();
    }
  }
}

void ControlHead::on_close(const std::shared_ptr<Connection>& c, const std::string& why) {
  int lost = -1;
  {
    std::lock_guard lk(mu_);
    for (auto& s : slots_) {
      if (s.conn != c) continue;
      spdlog::warn("control plane: rank {} ({}) left: {}", s.state.rank, s.state.peer, why);
      s.conn.reset();
      s.state.joined = s.state.ready = false;
      if (broken_.empty()) broken_ = fmt::format("worker rank {} left: {}", s.state.rank, why);
      lost = s.state.rank;
    }
  }
  cv_.notify_all();
  if (lost > 0 && opts_.on_rank_lost) opts_.on_rank_lost(lost, why);
}

void ControlHead::wait_for_workers(bool loaded, std::chrono::milliseconds timeout,
                                   const std::function<void(const std::string&)>& on_status,
                                   const std::function<bool()>& cancelled) {
  const char* done = loaded ? "loaded" : "joined";
  const auto until = Clock::now() + timeout;
  std::unique_lock lk(mu_);
  std::string shown;
  for (;;) {
    std::vector<int> missing;
    for (const auto& s : slots_)
      if (!(loaded ? s.state.ready : s.state.joined)) missing.push_back(s.state.rank);
    const std::string status =
        missing.empty() ? fmt::format("all {} ranks {}", opts_.world_size, done)
                        : fmt::format("{} of {} ranks {}; waiting for rank {}", opts_.world_size - missing.size(),
                                      opts_.world_size, done, fmt::join(missing, ", "));
    if (status != shown && on_status) {
      shown = status;
      lk.unlock();
      on_status(status);
      lk.lock();
    }
    if (missing.empty()) return;
    if (cancelled && cancelled()) throw std::runtime_error("stopped while waiting for worker ranks");
    if (Clock::now() >= until)
      throw std::runtime_error(fmt::format("worker rank(s) {} not {} within {} s (listening on {}:{})",
                                           fmt::join(missing, ", "), done, timeout.count() / 1000, opts_.address,
                                           opts_.port));
    cv_.wait_for(lk, std::chrono::milliseconds(200));
  }
}

void ControlHead::send_plan(const engine::StepPlan& plan) {
  const json::object m = plan_to_json(plan);
  std::lock_guard lk(mu_);
  for (auto& s : slots_)
    if (s.conn) s.conn->send(m);
}

void ControlHead::send_reform(int generation) {
  std::lock_guard lk(mu_);
  for (const auto& s : slots_)
    if (s.state.rank > 0 && !s.conn)
      throw std::runtime_error(fmt::format("worker rank {} is not connected", s.state.rank));
  // Every rank's fabric choice, so each worker's log shows the whole group's.
  json::array fabric;
  for (const auto& s : slots_) fabric.push_back(json::object{{"rank", s.state.rank}, {"choice", s.state.fabric.to_json()}});
  const json::object m{{"type", "reform"}, {"generation", generation}, {"fabric", std::move(fabric)}};
  for (auto& s : slots_) {
    if (s.conn) s.conn->send(m);
    s.state.health.clear();
  }
  generation_ = generation;
  broken_.clear();
}

uint64_t ControlHead::order_coverage(bool reset) {
  std::lock_guard lk(mu_);
  const uint64_t round = ++coverage_round_;
  const json::object m{{"type", "coverage"}, {"what", reset ? "reset" : "report"}, {"round", round}};
  for (auto& s : slots_)
    if (s.conn) s.conn->send(m);
  return round;
}

std::vector<RankCoverage> ControlHead::wait_coverage(uint64_t round, std::chrono::milliseconds timeout) {
  std::unique_lock lk(mu_);
  std::vector<int> missing;
  const bool answered = cv_.wait_for(lk, timeout, [&] {
    missing.clear();
    for (const auto& s : slots_)
      if (s.state.rank > 0 && s.coverage.round != round) missing.push_back(s.state.rank);
    return missing.empty();
  });
  if (!answered)
    throw std::runtime_error(fmt::format("worker rank(s) {} did not report their shape coverage within {} s",
                                         fmt::join(missing, ", "), timeout.count() / 1000));
  std::vector<RankCoverage> out;
  for (const auto& s : slots_)
    if (s.state.rank > 0) out.push_back(s.coverage);
  return out;
}

std::optional<std::string> ControlHead::trouble(std::chrono::milliseconds silence) const {
  std::lock_guard lk(mu_);
  const auto now = Clock::now();
  if (!broken_.empty()) return broken_;
  for (const auto& s : slots_) {
    if (s.state.rank == 0) continue;
    if (s.conn && now - s.heard > silence)
      return fmt::format("worker rank {} silent for {:.1f} s", s.state.rank,
                         std::chrono::duration<double>(now - s.heard).count());
  }
  return std::nullopt;
}

std::vector<RankState> ControlHead::ranks() const {
  std::lock_guard lk(mu_);
  std::vector<RankState> out;
  const auto now = Clock::now();
  for (const auto& s : slots_) {
    RankState r = s.state;
    if (r.rank > 0) r.heard_ago_s = std::chrono::duration<double>(now - s.heard).count();
    out.push_back(r);
  }
  return out;
}

}  // namespace inferd::cluster
