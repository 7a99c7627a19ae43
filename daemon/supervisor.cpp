#include "daemon/supervisor.hpp"

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include "daemon/daemon.hpp"

namespace inferd::daemon {

Supervisor::Supervisor(Daemon& daemon, EngineHost& engines, WarmupHost& warmup)
    : daemon_(daemon),
      enabled_(daemon.config().health.enable),
      sampler_(daemon, &engines,
               [this] { boost::asio::post(daemon_.supervisor_loop(), [this] { sample_and_act(true); }); }),
      report_(daemon.metrics(), sampler_),
      actions_(daemon, engines, warmup,
               {.warmed = [this] { sampler_.rebaseline(); }, .reopened = [this] { sampler_.probe_soon(); }}),
      timer_(daemon.supervisor_loop()) {
  if (HttpServer* http = daemon.http()) {
    register_supervisor_routes(*http, daemon.config().server.admin_api_key,
                               {.last_probe = [this] { return sampler_.last_probe(); },
                                .probe_now = [this] { return sampler_.probe_now(); },
                                .status = [this] {
                                  return SupervisorStatus{.enabled = enabled_,
                                                          .state = daemon_.lifecycle().state(),
                                                          .budget = sampler_.budget(),
                                                          .monitors = report_.last_signals(),
                                                          .decisions = actions_.decisions()};
                                }});
  }
  timer_.expires_after(sampler_.tick_every());
  timer_.async_wait([this](auto ec) { if (!ec) tick(); });
}

Supervisor::~Supervisor() { timer_.cancel(); }

void Supervisor::tick() {
  try {
    sample_and_act();
  } catch (const std::exception& e) {
    spdlog::error("supervisor: sampling failed: {}", e.what());
  }
  timer_.expires_after(sampler_.tick_every());
  timer_.async_wait([this](auto ec) { if (!ec) tick(); });
}

void Supervisor::sample_and_act(bool pressure_now) {
  const MonitorSample sample = sampler_.sample(pressure_now);
  report_.record(sample);
  const State state = daemon_.lifecycle().state();
  if (!enabled_ || actions_.recovering() || (state != State::Serving && state != State::Degraded)) return;
  actions_.act(sampler_.decide(sample.signals));
}

}  // namespace inferd::daemon
