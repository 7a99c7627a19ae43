#include "daemon/engine_host.hpp"

#include <spdlog/spdlog.h>

#include <ctime>

#include "daemon/config.hpp"
#include "daemon/daemon.hpp"
#include "daemon/health_routes.hpp"

namespace inferd::daemon {

engine::EngineOptions engine_options(const Config& cfg) {
  engine::EngineOptions o;
  o.model_path = cfg.model.path;
  o.threads = cfg.engine.threads;
  o.max_model_len = static_cast<int>(cfg.model.max_model_len);
  o.max_num_seqs = cfg.engine.max_num_seqs;
  o.max_num_batched_tokens = cfg.engine.max_num_batched_tokens;
  o.block_size = cfg.engine.block_size;
  o.enable_prefix_caching = cfg.engine.enable_prefix_caching;
  return o;
}

EngineHost::EngineHost(Daemon& daemon) {
  daemon.set_load_hook([this](Daemon& d) { load(d); });
}

EngineHost::~EngineHost() {
  if (engine_) engine_->stop();
}

void EngineHost::load(Daemon& d) {
  const Config& cfg = d.config();
  spdlog::info("loading {}", cfg.model.path);
  engine_ = std::make_unique<engine::Engine>(engine_options(cfg), &d.heartbeat());
  d.set_drive_heartbeat(false);
  d.served_model().set({.id = cfg.model_name(),
                        .root = cfg.model.path,
                        .max_model_len = engine_->max_model_len(),
                        .created = static_cast<int64_t>(std::time(nullptr))});
}

}  // namespace inferd::daemon
