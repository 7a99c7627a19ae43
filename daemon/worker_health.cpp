#include "daemon/worker_health.hpp"

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include "daemon/daemon.hpp"

namespace inferd::daemon {

WorkerHealth::WorkerHealth(Daemon& daemon)
    : sampler_(daemon, nullptr,
               [this, &daemon] { boost::asio::post(daemon.supervisor_loop(), [this] { sample(true); }); }),
      report_(daemon.metrics(), sampler_),
      timer_(daemon.supervisor_loop()) {
  timer_.expires_after(sampler_.tick_every());
  timer_.async_wait([this](auto ec) { if (!ec) tick(); });
}

WorkerHealth::~WorkerHealth() { timer_.cancel(); }

void WorkerHealth::tick() {
  try {
    sample(false);
  } catch (const std::exception& e) {
    spdlog::error("supervisor: sampling failed: {}", e.what());
  }
  timer_.expires_after(sampler_.tick_every());
  timer_.async_wait([this](auto ec) { if (!ec) tick(); });
}

void WorkerHealth::sample(bool pressure_now) {
  const MonitorSample s = sampler_.sample(pressure_now);
  report_.record(s);
  std::lock_guard lk(mu_);
  now_.clear();
  for (const auto& sig : s.signals) {
    // A worker's step waits on the head in every collective, so its step
    // deadline blames whichever rank is slow; the head's own deadline sees a
    // wedged worker (it waits for it). It stays on this rank's /metrics.
    if (sig.level == health::Level::Ok || sig.monitor == "step_deadline") continue;
    now_[sig.monitor] = sig;
    auto [it, fresh] = worst_.try_emplace(sig.monitor, sig);
    if (!fresh && sig.level > it->second.level) it->second = sig;
  }
}

std::vector<health::Signal> WorkerHealth::report() {
  std::lock_guard lk(mu_);
  std::vector<health::Signal> out;
  for (auto& [monitor, sig] : worst_) out.push_back(std::move(sig));
  // What holds now holds until a sample says otherwise, however often the
  // heartbeat comes.
  worst_ = now_;
  return out;
}

void WorkerHealth::clear() {
  std::lock_guard lk(mu_);
  worst_.clear();
  now_.clear();
}

}  // namespace inferd::daemon
