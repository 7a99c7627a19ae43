// inferd: parse the configuration, set up logging, run the daemon.
// Exit status: 0 after a clean stop, 1 when start-up or serving failed,
// 2 for a configuration error (one line on stderr).
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <spdlog/spdlog.h>

#include "daemon/config.hpp"
#include "daemon/daemon.hpp"
#include "daemon/engine_host.hpp"
#include "daemon/logging.hpp"
#include "daemon/supervisor.hpp"
#include "daemon/warmup_host.hpp"
#include "daemon/worker_host.hpp"
#include "faults/fault_points.hpp"
#include "inferd_config.h"

int main(int argc, char** argv) {
  using namespace inferd::daemon;
  const std::vector<std::string_view> args(argv + 1, argv + argc);
  CommandLine cmd;
  Config cfg;
  try {
    cmd = parse_command_line(args);
    if (cmd.help) {
      std::fputs(usage().c_str(), stdout);
      return 0;
    }
    if (cmd.version) {
      std::printf("inferd %s (%s)\n", INFERD_VERSION,
                  inferd::faults::kBuiltIn ? "fault points built in: a test build" : "no fault points");
      return 0;
    }
    cfg = load_config(cmd);
  } catch (const ConfigError& e) {
    // One line, whatever a quoted value contained.
    std::string line = e.what();
    std::replace(line.begin(), line.end(), '\n', ' ');
    std::fprintf(stderr, "inferd: %s\n", line.c_str());
    return 2;
  }
  if (const char* spec = std::getenv("INFERD_FAULTS")) {
#if INFERD_FAULTS
    try {
      inferd::faults::arm_faults_from_spec(spec);
    } catch (const std::invalid_argument& e) {
      std::fprintf(stderr, "inferd: INFERD_FAULTS: %s\n", e.what());
      return 2;
    }
#else
    // Asking for faults a build cannot fire must not pass silently.
    (void)spec;
    std::fputs("inferd: INFERD_FAULTS is set, but this build has no fault points; configure with -Dfaults=true\n",
               stderr);
    return 2;
#endif
  }

  // A client that hangs up must not kill the process.
  std::signal(SIGPIPE, SIG_IGN);
  const std::string target = init_logging(cfg.log);
  spdlog::info("inferd {} starting (log level {}, to {})", INFERD_VERSION, cfg.log.level, target);
  for (const std::string& warning : cfg.deprecated) spdlog::warn("{}", warning);
#if INFERD_FAULTS
  spdlog::warn("this build has fault points (-Dfaults=true): for tests, not for production");
  for (const auto& [name, value] : inferd::faults::armed_faults())
    spdlog::warn("fault point armed: {}{}{}", name, value.empty() ? "" : "=", value);
#endif
  try {
    const bool headless = cfg.parallel.headless;
    Daemon daemon(std::move(cfg), std::move(cmd));
    if (headless) {
      // A worker rank: the head serves, schedules and supervises the group.
      WorkerHost worker(daemon);
      const int code = daemon.run();
      if (code != 0 || daemon.abandoned_startup()) {
        spdlog::shutdown();
        worker.restore_stderr();
        std::_Exit(code);
      }
      return code;
    }
    EngineHost engine(daemon);  // destroyed before the daemon: it beats the daemon's heartbeat
    WarmupHost warmup(daemon, engine);
    Supervisor supervisor(daemon, engine, warmup);
    const int code = daemon.run();
    if (code != 0 || daemon.abandoned_startup()) {
      // Failed, or stopped while a load never returned: every request in flight
      // has had its answer. The engine (and a probe waiting on it) may be wedged
      // where nothing can cancel it, so no thread is waited for; only the log is
      // flushed.
      spdlog::shutdown();
      supervisor.restore_stderr();
      std::_Exit(code);
    }
    return code;
  } catch (const std::exception& e) {
    spdlog::critical("{}", e.what());
    return 1;
  }
}
