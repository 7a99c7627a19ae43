#include "daemon/engine_host.hpp"

#include <spdlog/spdlog.h>

#include <ctime>

#include "daemon/config.hpp"
#include "daemon/daemon.hpp"
#include "daemon/health_routes.hpp"
#include "daemon/openai_routes.hpp"

namespace inferd::daemon {

engine::EngineOptions engine_options(const Config& cfg) {
  engine::EngineOptions o;
  o.model_path = cfg.model.path;
  o.threads = cfg.engine.threads;
  o.max_model_len = static_cast<int>(cfg.model.max_model_len);
  o.max_num_seqs = cfg.engine.max_num_seqs;
  o.max_num_batched_tokens = cfg.engine.max_num_batched_tokens;
  o.max_waiting = static_cast<size_t>(cfg.engine.max_waiting);
  o.block_size = cfg.engine.block_size;
  o.enable_prefix_caching = cfg.engine.enable_prefix_caching;
  return o;
}

EngineHost::EngineHost(Daemon& daemon) {
  daemon.set_load_hook([this](Daemon& d) { load(d); });
  if (HttpServer* http = daemon.http())
    register_openai_routes(*http, daemon.lifecycle(), daemon.metrics(), [this] { return engine_.load(); },
                           {.served_model_name = daemon.config().model_name(), .api_key = daemon.config().server.api_key});
}

EngineHost::~EngineHost() {
  if (auto e = engine_.load()) e->stop();
}

void EngineHost::load(Daemon& d) {
  const Config& cfg = d.config();
  spdlog::info("loading {}", cfg.model.path);
  auto eng = std::make_shared<engine::Engine>(engine_options(cfg), &d.heartbeat());
  d.set_drive_heartbeat(false);
  d.served_model().set({.id = cfg.model_name(),
                        .root = cfg.model.path,
                        .max_model_len = eng->max_model_len(),
                        .created = static_cast<int64_t>(std::time(nullptr))});
  engine_.store(std::move(eng));
}

}  // namespace inferd::daemon
