// Puts the engine into the daemon: builds it from the configuration at Loading
// (the model loads, the scheduler starts), publishes the served model, and keeps
// it alive for as long as the daemon runs.
#pragma once
#include <memory>

#include "engine/engine.hpp"

namespace inferd::daemon {

class Daemon;
struct Config;

engine::EngineOptions engine_options(const Config& cfg);

class EngineHost {
 public:
  // Installs the load hook on the daemon; the engine exists once Loading is done.
  explicit EngineHost(Daemon& daemon);
  ~EngineHost();

  engine::Engine* engine() { return engine_.get(); }

 private:
  void load(Daemon& d);
  std::unique_ptr<engine::Engine> engine_;
};

}  // namespace inferd::daemon
