#include "cluster/control_worker.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "cluster/connection.hpp"

namespace inferd::cluster {

namespace asio = boost::asio;
namespace json = boost::json;
using Clock = std::chrono::steady_clock;

ControlWorker::ControlWorker(WorkerOptions opts)
    : opts_(std::move(opts)), work_(io_.get_executor()), heartbeat_(io_) {
  thread_ = std::thread([this] { io_.run(); });
}

ControlWorker::~ControlWorker() {
  stop();
  work_.reset();
  io_.stop();
  if (thread_.joinable()) thread_.join();
}

std::string ControlWorker::join(std::chrono::milliseconds timeout, const std::function<bool()>& cancelled) {
  const auto until = Clock::now() + timeout;
  auto stop_asked = [&] {
    std::lock_guard lk(mu_);
    return stopped_ || (cancelled && cancelled());
  };
  asio::ip::tcp::resolver resolver(io_);
  std::string last_error;
  for (;;) {
    if (stop_asked()) throw std::runtime_error("stopped while joining the head");
    if (Clock::now() >= until)
      throw std::runtime_error(fmt::format("the head at {}:{} did not answer within {} s (last: {})", opts_.master_addr,
                                           opts_.master_port, timeout.count() / 1000, last_error));
    boost::system::error_code ec;
    asio::ip::tcp::socket socket(io_);
    const auto eps = resolver.resolve(opts_.master_addr, std::to_string(opts_.master_port), ec);
    if (!ec) asio::connect(socket, eps, ec);
    if (ec) {
      last_error = ec.message();
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      continue;
    }
    auto c = std::make_shared<Connection>(std::move(socket));
    std::shared_ptr<Connection> old;
    {
      // A new connection: what the previous one carried (a welcome, orders,
      // why it went) belongs to a head that has gone.
      std::lock_guard lk(mu_);
      old = std::exchange(conn_, c);
      gone_ = welcomed_ = false;
      why_.clear();
      orders_.clear();
    }
    if (old) old->close();
    c->start([this](const std::shared_ptr<Connection>& c, json::object m) { if (current(c)) on_message(std::move(m)); },
             [this](const std::shared_ptr<Connection>& c, const std::string& why) { if (current(c)) on_close(why); });
    c->send({{"type", "hello"}, {"rank", opts_.rank}, {"fingerprint", opts_.fingerprint.to_json()}});
    std::unique_lock lk(mu_);
    while (!welcomed_ && !gone_ && Clock::now() < until && !stopped_) {
      cv_.wait_for(lk, std::chrono::milliseconds(200));
      lk.unlock();
      const bool cancel = cancelled && cancelled();
      lk.lock();
      if (cancel) break;
    }
    if (welcomed_) {
      asio::post(io_, [this] {
        heartbeat_.cancel();  // one chain of beats, whichever connection came before
        beat();
      });
      return c->local_address();
    }
    if (!why_.empty() && why_.rfind("refused: ", 0) == 0) throw Refused(why_.substr(9));
    last_error = why_.empty() ? "no answer to hello" : why_;
  }
}

bool ControlWorker::current(const std::shared_ptr<Connection>& c) const {
  std::lock_guard lk(mu_);
  return conn_ == c;
}

void ControlWorker::on_message(json::object m) {
  const auto* type = m.if_contains("type");
  const std::string t = type && type->is_string() ? std::string(type->as_string()) : "";
  std::lock_guard lk(mu_);
  if (t == "welcome") {
    welcomed_ = true;
  } else if (t == "refuse") {
    gone_ = true;
    why_ = "refused: " + (m.contains("reason") ? json::value_to<std::string>(m.at("reason")) : std::string("no reason"));
  } else if (t == "reform") {
    const int generation = m.contains("generation") ? json::value_to<int>(m.at("generation")) : 0;
    spdlog::warn("control plane: the head re-forms the group as generation {}", generation);
    if (const auto* f = m.if_contains("fabric"); f && f->is_array())
      for (const auto& e : f->as_array()) {
        const auto* o = e.if_object();
        const auto* rank = o ? o->if_contains("rank") : nullptr;
        const auto* choice = o ? o->if_contains("choice") : nullptr;
        if (!rank || !rank->is_int64() || !choice || !choice->is_object()) continue;
        try {
          const FabricChoice c = FabricChoice::from_json(choice->as_object());
          if (!c.empty()) spdlog::info("control plane: rank {}'s fabric: {}", rank->as_int64(), c.describe());
        } catch (const std::exception&) {
        }
      }
    orders_.clear();
    Order o;
    o.reform = generation;
    orders_.push_back(std::move(o));
    generation_ = generation;
    if (opts_.on_reform) opts_.on_reform(generation);
  } else if (t == "coverage") {
    Order o;
    o.coverage = m.contains("what") && m.at("what").is_string() ? std::string(m.at("what").as_string()) : "";
    o.round = m.contains("round") ? json::value_to<uint64_t>(m.at("round")) : 0;
    if (o.coverage == "reset" || o.coverage == "report") orders_.push_back(std::move(o));
  } else if (t == "plan") {
    try {
      Order o;
      o.plan = plan_from_json(m);
      orders_.push_back(std::move(o));
    } catch (const std::exception& e) {
      spdlog::error("control plane: {}", e.what());
      gone_ = true;
      why_ = e.what();
    }
  }
  cv_.notify_all();
}

void ControlWorker::on_close(const std::string& why) {
  std::lock_guard lk(mu_);
  if (!gone_) {
    gone_ = true;
    why_ = "the head's control connection closed: " + why;
  }
  cv_.notify_all();
}

void ControlWorker::beat() {
  std::shared_ptr<Connection> c;
  int generation = -1;
  {
    std::lock_guard lk(mu_);
    if (gone_) return;
    c = conn_;
    generation = generation_;
  }
  if (c) {
    json::object m{{"type", "heartbeat"}, {"rank", opts_.rank}, {"steps", steps_.load()}, {"generation", generation}};
    if (opts_.health) m["health"] = signals_to_json(opts_.health());
    c->send(std::move(m));
  }
  heartbeat_.expires_after(opts_.heartbeat_interval);
  heartbeat_.async_wait([this](auto ec) { if (!ec) beat(); });
}

void ControlWorker::report_coverage(uint64_t round, size_t total, size_t covered,
                                    const std::vector<std::string>& missing) {
  json::array names;
  for (const auto& k : missing) names.push_back(json::string(k));
  std::lock_guard lk(mu_);
  if (conn_)
    conn_->send({{"type", "coverage"}, {"rank", opts_.rank}, {"round", round}, {"total", total},
                 {"covered", covered}, {"missing", std::move(names)}});
}

void ControlWorker::ready() {
  std::lock_guard lk(mu_);
  if (conn_) conn_->send({{"type", "ready"}, {"rank", opts_.rank}});
}

std::optional<Order> ControlWorker::next() {
  std::unique_lock lk(mu_);
  cv_.wait(lk, [&] { return !orders_.empty() || gone_; });
  if (gone_ || orders_.empty()) return std::nullopt;
  Order o = std::move(orders_.front());
  orders_.pop_front();
  return o;
}

void ControlWorker::stop() {
  std::shared_ptr<Connection> c;
  {
    std::lock_guard lk(mu_);
    stopped_ = true;
    if (!gone_) {
      gone_ = true;
      why_ = "stopped";
    }
    c = conn_;
  }
  cv_.notify_all();
  asio::post(io_, [this] { heartbeat_.cancel(); });
  if (c) c->close();
}

std::string ControlWorker::why() const {
  std::lock_guard lk(mu_);
  return why_;
}

}  // namespace inferd::cluster
