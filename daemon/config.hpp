// inferd's configuration: built-in defaults, then one TOML file (--config), then
// command-line flags (vLLM's spelling where the meaning is the same). Every key is
// documented in etc/inferd.toml and docs/CONFIGURATION.md.
#pragma once
#include <array>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "warmup/plan.hpp"

namespace inferd::daemon {

// Bad configuration: the message names the file and line (or the flag) and the key.
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class LogTarget { Auto, Stderr, Journald };

// $INFERD_CACHE or ${XDG_CACHE_HOME:-~/.cache}/inferd, plus
// /models/SmolLM2-135M-Instruct.Q4_1.gguf.
std::string default_model_path();

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;            // empty: no authentication
  // The admin routes' own key (never the API key). Empty: they are served only
  // on the admin listener, without a key.
  std::string admin_api_key;
  std::string admin_api_key_file;  // where admin_api_key is read from at start
  int admin_port = 0;              // the admin listener on 127.0.0.1; 0: none
  std::string admin_socket;        // the admin listener on a Unix socket; empty: none
  std::string served_model_name;  // empty: the model file's name
  std::string tool_call_parser;   // vLLM's name; empty: the chat template's format
  std::string reasoning_parser;   // vLLM's name; empty: the chat template's (none for most)
  int64_t max_body_bytes = 8 << 20;
  int idle_timeout_s = 60;
  int request_timeout_s = 600;
  int io_threads = 2;
  int work_threads = 2;
  int max_connections = 4096;
  int drain_timeout_s = 30;
  bool operator==(const ServerConfig&) const = default;
};

struct ModelConfig {
  std::string path = default_model_path();
  int64_t max_model_len = 0;  // 0: the model's own context length
  // sha256sum manifest the model's files are checked against before the load;
  // empty: SHA256SUMS in a checkpoint directory, or FILE.sha256 beside a GGUF file.
  std::string manifest;
  std::string chat_template;  // a Jinja file used instead of the model's own; empty: the model's
  bool operator==(const ModelConfig&) const = default;
};

// Speculative decoding (--speculative-config, as vLLM's JSON): prompt lookup
// ("ngram"), a draft model ("draft_model", `model` its path) or a draft head
// ("draft_head", `model` its path).
// num_speculative_tokens 0: off.
struct SpeculativeConfig {
  std::string method;
  int num_speculative_tokens = 0;
  int prompt_lookup_min = 0;
  int prompt_lookup_max = 0;
  std::string model;  // "draft_model": the draft's GGUF file or checkpoint directory; "draft_head": the head's GGUF
  bool operator==(const SpeculativeConfig&) const = default;
};

struct EngineConfig {
  std::string device = "cpu";  // cpu, cuda or cuda:N
  int threads = 0;  // 0: every core
  int max_num_seqs = 64;
  int max_num_batched_tokens = 2048;
  int max_waiting = 256;  // queued requests beyond this answer 429
  int block_size = 16;
  bool enable_prefix_caching = true;
  double load_timeout_s = 0;  // the longest Loading may take; 0: by the model file's size (load_timeout())
  double gpu_memory_utilization = 0.9;
  int tensor_parallel_size = 1;
  // Decode batch sizes run as CUDA graphs; a batch between sizes is padded to the
  // next, a wider one runs eagerly. No effect on the CPU.
  std::vector<int> cuda_graph_sizes = {1, 2, 4, 8};
  bool enforce_eager = false;  // no CUDA graphs at all
  SpeculativeConfig speculative;
  bool operator==(const EngineConfig&) const = default;
};

struct ParallelConfig {
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool headless = false;
  bool operator==(const ParallelConfig&) const = default;
};

struct LogConfig {
  std::string level = "info";  // trace, debug, info, warn, error, critical, off
  LogTarget target = LogTarget::Auto;
  bool operator==(const LogConfig&) const = default;
};

// The supervisor ([health]): sampling, thresholds and the recovery budget.
struct HealthConfig {
  bool enable = true;
  int interval_ms = 250;                 // how often the monitors are sampled
  // A monitor's own sampling interval; 0: interval_ms. The supervisor ticks at the shortest.
  int psi_interval_ms = 0;
  int meminfo_interval_ms = 0;
  int process_interval_ms = 1000;        // counting open fds walks /proc/self/fd
  int log_interval_ms = 0;
  int step_deadline_interval_ms = 0;
  int gpu_interval_ms = 1000;            // NVML queries, per watched GPU
  // The GPUs the gpu monitor watches, as CUDA device indices; empty: the
  // engine's own with --device cuda[:N], none on the CPU.
  std::vector<int> gpu_devices;
  std::string procfs_root = "/proc";     // tests point it at recorded files
  bool capture_stderr = true;            // scan our own (and children's) stderr
  std::string log_patterns;              // extra patterns, one per line: "category level regex"
  double probe_interval_s = 30;          // 0: only on POST /admin/probe
  int probe_budget_ms = 10000;
  double step_deadline_floor_s = 10;     // a step older than max(floor, k x p99) is a wedge
  double step_deadline_p99_factor = 10;
  int64_t mem_warn_bytes = 12'000'000'000;
  double mem_warn_fraction = 0.25;       // of MemTotal; the smaller floor applies
  int64_t mem_shed_bytes = int64_t{8} << 30;
  double mem_shed_fraction = 0.15;
  int64_t mem_critical_bytes = int64_t{1} << 30;
  double mem_critical_fraction = 0.05;
  int64_t min_available_bytes = 0;       // start-up refuses to leave Loading below this
  // Memory pressure (percent of time stalled) at which warn, shed and critical start.
  std::array<double, 3> psi_some_avg10{10, 20, 40};
  std::array<double, 3> psi_full_avg10{5, 10, 20};
  std::array<double, 3> psi_some_avg60{5, 10, 25};
  std::array<double, 3> psi_full_avg60{2, 5, 10};
  double rss_growth_warn = 0.25;         // RSS above the post-warm-up baseline by this share warns
  int calm_samples_to_unshed = 8;
  int max_recoveries = 3;
  int recovery_window_s = 600;
  int reset_timeout_ms = 10000;          // a wedge the engine cannot leave in this time fails the process
  bool operator==(const HealthConfig&) const = default;
};

// The RDMA fabric pre-flight of a group spanning nodes (docs/OPERATIONS.md, "Fabric").
struct FabricConfig {
  std::string sysfs_root = "/sys";  // tests point it at recorded trees
  std::string interface;            // "": chosen by master_addr
  // The port monitor: error counters' growth per second, over one sampling
  // interval, that warns; 0: never.
  double link_downed_warn_per_s = 0.01;
  double errors_warn_per_s = 1;     // any other error counter
  bool operator==(const FabricConfig&) const = default;
};

struct Config {
  ServerConfig server;
  ModelConfig model;
  EngineConfig engine;
  ParallelConfig parallel;
  LogConfig log;
  warmup::WarmupOptions warmup;
  HealthConfig health;
  FabricConfig fabric;
  // One warning per key or flag given under a deprecated name, logged once
  // logging is up.
  std::vector<std::string> deprecated;
  bool operator==(const Config&) const = default;

  // The name /v1/models reports: served_model_name, else the model file's name
  // without its directory and ".gguf".
  std::string model_name() const;
};

// What the command line asked for; kept so SIGHUP can rebuild the configuration
// exactly as start-up did.
struct CommandLine {
  std::string config_path;  // empty: no file
  // (flag without "--", value) in order; boolean flags carry "true"/"false".
  std::vector<std::pair<std::string, std::string>> overrides;
  bool help = false;
  bool version = false;
};

// `args` excludes the program name. Throws ConfigError naming the flag.
CommandLine parse_command_line(std::span<const std::string_view> args);

// Defaults overlaid with one TOML document; `source` names it in errors.
Config parse_config_toml(std::string_view text, std::string_view source);
// Defaults, then the file named by the command line (if any), then its flags,
// then checks that span keys. Throws ConfigError.
Config load_config(const CommandLine& cmd);

std::string usage();

// Every key a file may set, as "section.name", in the order usage() lists them.
std::vector<std::string> config_keys();

}  // namespace inferd::daemon
