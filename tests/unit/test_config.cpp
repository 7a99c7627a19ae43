#include <doctest/doctest.h>

#include "inferd_config.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <string>
#include <unistd.h>
#include <vector>

#include "daemon/config.hpp"
#include "daemon/daemon.hpp"
#include "daemon/engine_host.hpp"
#include "test_paths.hpp"

using namespace inferd::daemon;

namespace {

// A TOML file in a fresh temporary directory, removed at scope exit.
struct TempFile {
  std::filesystem::path path;
  explicit TempFile(const std::string& text) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "inferd-config-XXXXXX").string();
    path = std::filesystem::path(mkdtemp(tmpl.data())) / "x.toml";
    std::ofstream(path) << text;
  }
  ~TempFile() { std::filesystem::remove_all(path.parent_path()); }
};

CommandLine cmdline(std::vector<std::string_view> args) { return parse_command_line(args); }

std::string config_error(std::string_view toml) {
  try {
    parse_config_toml(toml, "x.toml");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

std::string flag_error(std::vector<std::string_view> args) {
  try {
    load_config(parse_command_line(args));
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

// Sets an environment variable for one scope.
struct ScopedEnv {
  std::string name;
  std::optional<std::string> old;
  ScopedEnv(std::string n, const char* value) : name(std::move(n)) {
    if (const char* v = std::getenv(name.c_str())) old = v;
    if (value) setenv(name.c_str(), value, 1);
    else unsetenv(name.c_str());
  }
  ~ScopedEnv() {
    if (old) setenv(name.c_str(), old->c_str(), 1);
    else unsetenv(name.c_str());
  }
};

}  // namespace

TEST_SUITE("config") {
  TEST_CASE("config: the default model path follows INFERD_CACHE, then XDG_CACHE_HOME, then HOME") {
    {
      ScopedEnv cache("INFERD_CACHE", "/srv/cache");
      CHECK(default_model_path() == "/srv/cache/models/SmolLM2-135M-Instruct.Q4_1.gguf");
      CHECK(Config{}.model.path == "/srv/cache/models/SmolLM2-135M-Instruct.Q4_1.gguf");
    }
    ScopedEnv cache("INFERD_CACHE", nullptr);
    {
      ScopedEnv xdg("XDG_CACHE_HOME", "/xdg");
      CHECK(default_model_path() == "/xdg/inferd/models/SmolLM2-135M-Instruct.Q4_1.gguf");
    }
    ScopedEnv xdg("XDG_CACHE_HOME", nullptr);
    ScopedEnv home("HOME", "/home/u");
    CHECK(default_model_path() == "/home/u/.cache/inferd/models/SmolLM2-135M-Instruct.Q4_1.gguf");
  }

  TEST_CASE("config: a good file sets every section") {
    const Config c = parse_config_toml(R"(
[server]
host = "0.0.0.0"
port = 9001
api_key = "sk-test"
served_model_name = "smol"
max_body_bytes = 65536
idle_timeout_s = 5
request_timeout_s = 30
io_threads = 4
drain_timeout_s = 3
[model]
path = "/models/m.gguf"
max_model_len = 4096
[engine]
threads = 2
max_num_seqs = 8
max_num_batched_tokens = 256
block_size = 32
enable_prefix_caching = false
[log]
level = "debug"
target = "journald"
)", "good.toml");
    CHECK(c.server.host == "0.0.0.0");
    CHECK(c.server.port == 9001);
    CHECK(c.server.api_key == "sk-test");
    CHECK(c.server.served_model_name == "smol");
    CHECK(c.server.max_body_bytes == 65536);
    CHECK(c.server.idle_timeout_s == 5);
    CHECK(c.server.request_timeout_s == 30);
    CHECK(c.server.io_threads == 4);
    CHECK(c.server.drain_timeout_s == 3);
    CHECK(c.model.path == "/models/m.gguf");
    CHECK(c.model.max_model_len == 4096);
    CHECK(c.engine.threads == 2);
    CHECK(c.engine.max_num_seqs == 8);
    CHECK(c.engine.max_num_batched_tokens == 256);
    CHECK(c.engine.block_size == 32);
    CHECK_FALSE(c.engine.enable_prefix_caching);
    CHECK(c.log.level == "debug");
    CHECK(c.log.target == LogTarget::Journald);
    CHECK(c.model_name() == "smol");
  }

  TEST_CASE("config: keys left out keep their defaults; an empty file is the defaults") {
    CHECK(parse_config_toml("", "empty.toml") == Config{});
    const Config c = parse_config_toml("[engine]\nmax_num_seqs = 3\n", "x.toml");
    Config expected;
    expected.engine.max_num_seqs = 3;
    CHECK(c == expected);
  }

  TEST_CASE("config: model path: empty means the default, ~/ means HOME, and the name derives from it") {
    ScopedEnv home("HOME", "/home/u");
    CHECK(parse_config_toml("[model]\npath = \"\"\n", "x.toml").model.path == default_model_path());
    const Config c = parse_config_toml("[model]\npath = \"~/m/tiny.gguf\"\n", "x.toml");
    CHECK(c.model.path == "/home/u/m/tiny.gguf");
    CHECK(c.model_name() == "tiny");
    CHECK(c.model.manifest.empty());
    CHECK(parse_config_toml("[model]\nmanifest = \"~/m/SUMS\"\n", "x.toml").model.manifest == "/home/u/m/SUMS");
    CHECK(load_config(cmdline({"--model-manifest", "/m/SHA256SUMS"})).model.manifest == "/m/SHA256SUMS");
  }

  TEST_CASE("config: bad files name the file, line and key") {
    CHECK(config_error("[engine]\nmax_num_seqs = 8\nmax_num_sequences = 8\n") ==
          "x.toml:3: [engine] max_num_sequences: unknown key");
    CHECK(config_error("\n[gpu]\nx = 1\n") == "x.toml:2: [gpu]: unknown section (known: server, model, engine, parallel, log, warmup, health, fabric)");
    CHECK(config_error("port = 8000\n") ==
          "x.toml:1: port: keys belong in a section ([server], [model], [engine], [parallel], [log], [warmup], [health] or [fabric])");
    CHECK(config_error("[server]\nport = \"8000\"\n") == "x.toml:2: [server] port: expected an integer, got a string");
    CHECK(config_error("[engine]\nthreads = 1.5\n") ==
          "x.toml:2: [engine] threads: expected an integer, got a floating-point number");
    CHECK(config_error("[engine]\nenable_prefix_caching = 1\n") ==
          "x.toml:2: [engine] enable_prefix_caching: expected a boolean, got an integer");
    CHECK(config_error("[log]\nlevel = [\"info\"]\n") == "x.toml:2: [log] level: expected a string, got an array");
    CHECK(config_error("\n\n\n\n\n[engine]\nmax_num_seqs = 0\n") ==
          "x.toml:7: [engine] max_num_seqs: must be between 1 and 4096, got 0");
    CHECK(config_error("[server]\nport = 70000\n") == "x.toml:2: [server] port: must be between 1 and 65535, got 70000");
    CHECK(config_error("[engine]\nblock_size = 24\n") == "x.toml:2: [engine] block_size: must be a power of two, got 24");
    CHECK(config_error("[engine]\ngpu_memory_utilization = 0.0\n") ==
          "x.toml:2: [engine] gpu_memory_utilization: must be greater than 0 and at most 1, got 0");
    CHECK(config_error("[log]\nlevel = \"loud\"\n") ==
          "x.toml:2: [log] level: must be one of trace, debug, info, warn, error, critical, off, got 'loud'");
    CHECK(config_error("[log]\ntarget = \"file\"\n") ==
          "x.toml:2: [log] target: must be one of auto, stderr, journald, got 'file'");
    CHECK(config_error("[server]\nhost = \"\"\n") == "x.toml:2: [server] host: must not be empty");
    CHECK(config_error("[warmup]\ndepth = \"shallow\"\n") ==
          "x.toml:2: [warmup] depth: must be full or least, got 'shallow'");
    CHECK(config_error("[parallel]\nnnodes = 2\nnode_rank = 2\n") ==
          "x.toml:3: [parallel] node_rank: node_rank must be less than nnodes (2), got 2");
  }

  TEST_CASE("config: TOML syntax errors name the file and line") {
    const std::string e = config_error("[server]\nport = 80\nhost = \n");
    CHECK(e.starts_with("x.toml:3: invalid TOML: "));
    CHECK(config_error("[server]\nport = 1\nport = 2\n").starts_with("x.toml:3: invalid TOML: "));
  }

  TEST_CASE("config: flags in both spellings, booleans and their --no- forms") {
    const Config c = load_config(cmdline({"--port", "9000", "--host=0.0.0.0", "--max-num-seqs=5", "--model", "/m.gguf",
                                          "--no-enable-prefix-caching", "--log-level", "warn", "--threads", "3",
                                          "--served-model-name", "m", "--api-key=k", "--block-size", "64",
                                          "--max-num-batched-tokens", "128", "--max-model-len", "1024"}));
    CHECK(c.server.port == 9000);
    CHECK(c.server.host == "0.0.0.0");
    CHECK(c.engine.max_num_seqs == 5);
    CHECK(c.model.path == "/m.gguf");
    CHECK_FALSE(c.engine.enable_prefix_caching);
    CHECK(c.log.level == "warn");
    CHECK(c.engine.threads == 3);
    CHECK(c.server.served_model_name == "m");
    CHECK(c.server.api_key == "k");
    CHECK(c.engine.block_size == 64);
    CHECK(c.engine.max_num_batched_tokens == 128);
    CHECK(c.model.max_model_len == 1024);
    CHECK(load_config(cmdline({"--no-enable-prefix-caching", "--enable-prefix-caching"})).engine.enable_prefix_caching);
    CHECK(cmdline({"--help"}).help);
    CHECK(cmdline({"--version"}).version);
  }

  TEST_CASE("config: bad flags name the flag") {
    CHECK(flag_error({"--prot", "8000"}) == "--prot: unknown flag (see --help)");
    CHECK(flag_error({"--port"}) == "--port: missing value");
    CHECK(flag_error({"--port", "--host", "h"}) == "--port: missing value");
    CHECK(flag_error({"--port", "80x"}) == "--port: expected an integer, got '80x'");
    CHECK(flag_error({"--port=0"}) == "--port: must be between 1 and 65535, got 0");
    CHECK(flag_error({"--gpu-memory-utilization", "lots"}) == "--gpu-memory-utilization: expected a number, got 'lots'");
    CHECK(flag_error({"--headless=yes"}) == "--headless: takes no value");
    CHECK(flag_error({"--log-level", "chatty"}) ==
          "--log-level: must be one of trace, debug, info, warn, error, critical, off, got 'chatty'");
    CHECK(flag_error({"--warmup-depth", "some"}) == "--warmup-depth: must be full or least, got 'some'");
    CHECK(flag_error({"model.gguf"}) == "unexpected argument 'model.gguf' (flags start with --; see --help)");
    CHECK(flag_error({"--node-rank", "3"}) == "--node-rank: node_rank must be less than nnodes (1), got 3");
    CHECK(flag_error({"--config", "/nonexistent/inferd.toml"}) ==
          "/nonexistent/inferd.toml: cannot read config file: No such file or directory");
  }

  TEST_CASE("config: flags override the file") {
    TempFile f("[server]\nport = 8100\nhost = \"0.0.0.0\"\n[engine]\nmax_num_seqs = 7\n");
    const std::string path = f.path.string();
    const Config c = load_config(cmdline({"--config", path, "--port", "8200"}));
    CHECK(c.server.port == 8200);
    CHECK(c.server.host == "0.0.0.0");
    CHECK(c.engine.max_num_seqs == 7);
    // A flag after --config and one before it both win over the file.
    CHECK(load_config(cmdline({"--max-num-seqs=9", "--config=" + path})).engine.max_num_seqs == 9);
  }

  TEST_CASE("config: errors in a file on disk name its path") {
    TempFile f("[engine]\n\nmax_num_seqs = 5000\n");
    const std::string path = f.path.string();
    CHECK(flag_error({"--config", path}) == path + ":3: [engine] max_num_seqs: must be between 1 and 4096, got 5000");
  }

  TEST_CASE("config: the shipped etc/inferd.toml parses and equals the defaults") {
    const std::string path = test_paths::source_dir() + "/etc/inferd.toml";
    REQUIRE(std::filesystem::exists(path));
    CHECK(load_config(cmdline({"--config", path})) == Config{});
  }

  TEST_CASE("config: the shipped etc/worker.toml is a headless rank 1 of a group of 2") {
    const Config c = load_config(cmdline({"--config", test_paths::source_dir() + "/etc/worker.toml"}));
    CHECK(c.parallel.headless);
    CHECK(c.parallel.node_rank == 1);
    CHECK(c.parallel.nnodes == 2);
    CHECK(c.engine.tensor_parallel_size == 2);
    CHECK(c.parallel.master_port == Config{}.parallel.master_port);
  }

  TEST_CASE("config: etc/inferd.toml documents every key") {
    std::ifstream in(test_paths::source_dir() + "/etc/inferd.toml");
    std::set<std::string> documented;
    std::string line, section;
    while (std::getline(in, line)) {
      if (line.starts_with("[")) section = line.substr(1, line.find(']') - 1);
      else if (!line.empty() && line[0] != '#' && line.find(" = ") != std::string::npos)
        documented.insert(section + "." + line.substr(0, line.find(" = ")));
    }
    const auto keys = config_keys();
    CHECK(keys.size() > 60);
    for (const std::string& k : keys) {
      INFO(k);
      CHECK(documented.count(k) == 1);
    }
  }

  TEST_CASE("config: [fabric] sysfs_root and interface from the file, --sysfs-root from the command line") {
    CHECK(Config{}.fabric.sysfs_root == "/sys");
    CHECK(Config{}.fabric.interface.empty());
    const Config c = parse_config_toml("[fabric]\nsysfs_root = \"/tmp/tree\"\ninterface = \"ens1f0np0\"\n", "x.toml");
    CHECK(c.fabric.sysfs_root == "/tmp/tree");
    CHECK(c.fabric.interface == "ens1f0np0");
    CHECK(load_config(cmdline({"--sysfs-root", "/tmp/t"})).fabric.sysfs_root == "/tmp/t");
    CHECK(config_error("[fabric]\nsysfs_root = \"\"\n") == "x.toml:2: [fabric] sysfs_root: must not be empty");
    CHECK(config_error("[fabric]\n\nbogus = 1\n") == "x.toml:3: [fabric] bogus: unknown key");
    CHECK(usage().find("--sysfs-root TEXT") != std::string::npos);
    CHECK(Config{}.fabric.errors_warn_per_s == 1);
    CHECK(Config{}.fabric.link_downed_warn_per_s == 0.01);
    const auto f = parse_config_toml("[fabric]\nerrors_warn_per_s = 5\nlink_downed_warn_per_s = 0.5\n", "x.toml").fabric;
    CHECK(f.errors_warn_per_s == 5);
    CHECK(f.link_downed_warn_per_s == 0.5);
    CHECK(config_error("[fabric]\nerrors_warn_per_s = -1\n") ==
          "x.toml:2: [fabric] errors_warn_per_s: must be between 0 and 1048576, got -1");
  }

  TEST_CASE("config: --tool-call-parser and --reasoning-parser take vLLM's names that are implemented") {
    CHECK(Config{}.server.tool_call_parser.empty());
    CHECK(Config{}.server.reasoning_parser.empty());
    const Config c = load_config(cmdline({"--tool-call-parser", "hermes", "--reasoning-parser=deepseek_r1"}));
    CHECK(c.server.tool_call_parser == "hermes");
    CHECK(c.server.reasoning_parser == "deepseek_r1");
    CHECK(parse_config_toml("[server]\nreasoning_parser = \"qwen3\"\n", "x.toml").server.reasoning_parser == "qwen3");
    CHECK(load_config(cmdline({"--tool-call-parser", "mistral"})).server.tool_call_parser == "mistral");
    CHECK(load_config(cmdline({"--tool-call-parser", "llama3_json"})).server.tool_call_parser == "llama3_json");
    CHECK(load_config(cmdline({"--tool-call-parser", "deepseek_v4"})).server.tool_call_parser == "deepseek_v4");
    CHECK(load_config(cmdline({"--tool-call-parser", "deepseek_v32"})).server.tool_call_parser == "deepseek_v32");
    CHECK(load_config(cmdline({"--reasoning-parser", "deepseek_v4"})).server.reasoning_parser == "deepseek_v4");
    CHECK(flag_error({"--tool-call-parser", "pythonic"}) ==
          "--tool-call-parser: 'pythonic' is not implemented; implemented: hermes, mistral, llama3_json, deepseek_v32 or deepseek_v4 (empty: the chat template's format)");
    CHECK(flag_error({"--reasoning-parser", "granite"}) ==
          "--reasoning-parser: 'granite' is not implemented; implemented: deepseek_r1, qwen3 or deepseek_v4 (empty: the chat template's format)");
  }

  TEST_CASE("config: [engine] max_waiting from the file and --max-waiting, within 1..1048576") {
    CHECK(Config{}.engine.max_waiting == 256);
    CHECK(parse_config_toml("[engine]\nmax_waiting = 4\n", "x.toml").engine.max_waiting == 4);
    CHECK(load_config(cmdline({"--max-waiting", "1"})).engine.max_waiting == 1);
    CHECK(load_config(cmdline({"--max-waiting=1048576"})).engine.max_waiting == 1048576);
    CHECK(config_error("[engine]\nmax_waiting = 0\n") ==
          "x.toml:2: [engine] max_waiting: must be between 1 and 1048576, got 0");
    CHECK(flag_error({"--max-waiting", "many"}) == "--max-waiting: expected an integer, got 'many'");
    CHECK(flag_error({"--max-waiting", "-1"}) == "--max-waiting: must be between 1 and 1048576, got -1");
    CHECK(usage().find("--max-waiting N") != std::string::npos);
  }

  TEST_CASE("config: keys whose feature is not built yet are refused unless left at their default") {
    // gpu_memory_utilization is built, for a GPU: on the CPU any other value is refused.
    CHECK(config_error("[engine]\ngpu_memory_utilization = 0.5\n") ==
          "x.toml:2: [engine] gpu_memory_utilization: applies to --device cuda only: the CPU's KV cache is not sized by "
          "it; leave it at its default");
    CHECK(flag_error({"--gpu-memory-utilization", "0.8"}).find("--gpu-memory-utilization: applies to --device cuda only") ==
          0);
    // Their defaults, written out, are fine.
    CHECK(load_config(cmdline({"--tensor-parallel-size", "1", "--nnodes", "1", "--node-rank", "0", "--no-headless",
                               "--gpu-memory-utilization", "0.9", "--master-port", "29500"})) == Config{});
  }

  TEST_CASE("config: a tensor-parallel group is one process per rank, rank 0 the head, the others headless") {
    const Config head = load_config(cmdline({"--tensor-parallel-size", "2", "--nnodes", "2", "--master-addr",
                                             "10.0.0.1", "--master-port", "29600"}));
    CHECK(head.engine.tensor_parallel_size == 2);
    CHECK(head.parallel.master_addr == "10.0.0.1");
    const Config worker = load_config(cmdline({"--tensor-parallel-size", "2", "--nnodes", "2", "--node-rank", "1",
                                               "--headless"}));
    CHECK(worker.parallel.headless);
    CHECK(config_error("[engine]\ntensor_parallel_size = 2\n") ==
          "x.toml:2: [engine] tensor_parallel_size: nnodes (1) must equal tensor_parallel_size (2): each inferd process "
          "is one rank of the group");
    CHECK(flag_error({"--nnodes", "2"}) ==
          "--nnodes: nnodes (2) must equal tensor_parallel_size (1): each inferd process is one rank of the group");
    CHECK(flag_error({"--tensor-parallel-size", "2", "--nnodes", "2", "--node-rank", "1"}) ==
          "--node-rank: node_rank 1 is a worker rank: add --headless (only rank 0 serves the API)");
    CHECK(flag_error({"--headless"}) == "--headless: a headless worker has node_rank 1 or more (rank 0 is the head)");
    CHECK(flag_error({"--tensor-parallel-size", "2", "--nnodes", "2", "--master-port", "65535"}) ==
          "--master-port: master_port must leave room for the rendezvous port after it (1-65534)");
  }

  TEST_CASE("config: [engine] device: cpu by default; cuda only in builds with CUDA; anything else is refused") {
    CHECK(Config{}.engine.device == "cpu");
    CHECK(load_config(cmdline({"--device", "cpu"})).engine.device == "cpu");
    CHECK(flag_error({"--device", "tpu"}) == "--device: must be cpu, cuda or cuda:N, got 'tpu'");
    CHECK(flag_error({"--device", "cuda:x"}) == "--device: must be cpu, cuda or cuda:N, got 'cuda:x'");
    CHECK(config_error("[engine]\ndevice = \"cuda:-1\"\n") ==
          "x.toml:2: [engine] device: must be cpu, cuda or cuda:N, got 'cuda:-1'");
#if INFERD_HAVE_CUDA
    CHECK(load_config(cmdline({"--device", "cuda:1"})).engine.device == "cuda:1");
#else
    CHECK(flag_error({"--device", "cuda"}) ==
          "--device: 'cuda': this build has no CUDA backend (configure with -Dcuda=enabled)");
    CHECK(config_error("[engine]\ndevice = \"cuda:0\"\n") ==
          "x.toml:2: [engine] device: 'cuda:0': this build has no CUDA backend (configure with -Dcuda=enabled)");
#endif
  }

  TEST_CASE("config: [warmup] and [health] keys, their flags and their errors") {
    const Config c = parse_config_toml("[warmup]\nretries = 5\nphase_timeout_s = 12\n[health]\n"
                                       "psi_some_avg10 = \"1,2.5,3\"\nmax_recoveries = 7\nmeminfo_interval_ms = 40\n",
                                       "x.toml");
    CHECK(c.health.meminfo_interval_ms == 40);
    CHECK(c.health.psi_interval_ms == 0);  // 0: the common interval_ms
    CHECK(config_error("[health]\nlog_interval_ms = -1\n").find("log_interval_ms") != std::string::npos);
    CHECK(c.warmup.retries == 5);
    CHECK(c.warmup.phase_timeout_s == 12.0);
    CHECK(c.health.psi_some_avg10 == std::array<double, 3>{1, 2.5, 3});
    CHECK(c.health.max_recoveries == 7);
    CHECK(!load_config(cmdline({"--no-warmup"})).warmup.enable);
    CHECK(!load_config(cmdline({"--no-supervise"})).health.enable);
    CHECK(load_config(cmdline({"--step-deadline-floor", "1.5"})).health.step_deadline_floor_s == 1.5);
    CHECK(config_error("[health]\npsi_full_avg60 = \"5,2,10\"\n") ==
          "x.toml:2: [health] psi_full_avg60: must be three ascending percentages \"warn,shed,critical\", got '5,2,10'");
    CHECK(config_error("[health]\npsi_full_avg60 = \"5,6\"\n").find("three ascending") != std::string::npos);
    CHECK(config_error("[warmup]\nphase_timeout_s = 0\n") ==
          "x.toml:2: [warmup] phase_timeout_s: must be between 1 and 86400, got 0");
    CHECK(config_error("[health]\nwatchdog = 1\n") == "x.toml:2: [health] watchdog: unknown key");
  }

  TEST_CASE("config: [health] log_patterns errors name the file, line and key, and the pattern's line") {
    const Config c = parse_config_toml("[health]\nlog_patterns = \"\"\"\ndisk critical I/O error .*\n\ngpu warn Xid [0-9]+\n\"\"\"\n",
                                       "x.toml");
    CHECK(c.health.log_patterns == "disk critical I/O error .*\n\ngpu warn Xid [0-9]+\n");
    CHECK(config_error("[health]\nlog_patterns = \"disk critical I/O error (\"\n") ==
          "x.toml:2: [health] log_patterns: line 1 'disk critical I/O error (': log pattern 'I/O error (' (disk): "
          "missing closing parenthesis");
    CHECK(config_error("[health]\n\nlog_patterns = \"\"\"\ngpu warn Xid\ndisk fatal oops\n\"\"\"\n") ==
          "x.toml:3: [health] log_patterns: line 2 'disk fatal oops': level must be warn, shed or critical, got 'fatal'");
    CHECK(config_error("[health]\nlog_patterns = \"disk critical\"\n") ==
          "x.toml:2: [health] log_patterns: line 1 'disk critical': each line is 'category level regex'");
  }

  TEST_CASE("config: [engine] cuda_graph_sizes and --cuda-graph-sizes; --enforce-eager turns graphs off") {
    CHECK(Config{}.engine.cuda_graph_sizes == std::vector<int>{1, 2, 4, 8});
    CHECK(!Config{}.engine.enforce_eager);
    CHECK(engine_options(Config{}).graph_sizes == std::vector<int>{1, 2, 4, 8});
    // The KV cache is sized by device memory on a GPU only.
    CHECK(engine_options(Config{}).gpu_memory_utilization == 0);
    Config gpu;
    gpu.engine.device = "cuda:1";
    gpu.engine.gpu_memory_utilization = 0.5;
    CHECK(engine_options(gpu).gpu_memory_utilization == 0.5);
    CHECK(parse_config_toml("[engine]\ncuda_graph_sizes = \"16, 1,4,4\"\n", "x.toml").engine.cuda_graph_sizes ==
          std::vector<int>{1, 4, 16});
    CHECK(parse_config_toml("[engine]\ncuda_graph_sizes = \"\"\n", "x.toml").engine.cuda_graph_sizes.empty());
    CHECK(load_config(cmdline({"--cuda-graph-sizes", "3"})).engine.cuda_graph_sizes == std::vector<int>{3});
    CHECK(load_config(cmdline({"--cuda-graph-sizes=1,2,4,8,16,32"})).engine.cuda_graph_sizes ==
          std::vector<int>{1, 2, 4, 8, 16, 32});
    const std::string why = "must be batch sizes from 1 to 4096 separated by commas, like \"1,2,4,8\" (\"\" for none)";
    CHECK(flag_error({"--cuda-graph-sizes", "1,,2"}) == "--cuda-graph-sizes: " + why + ", got '1,,2'");
    CHECK(flag_error({"--cuda-graph-sizes", "0"}) == "--cuda-graph-sizes: " + why + ", got '0'");
    CHECK(flag_error({"--cuda-graph-sizes", "8,"}) == "--cuda-graph-sizes: " + why + ", got '8,'");
    CHECK(config_error("[engine]\ncuda_graph_sizes = \"4097\"\n") ==
          "x.toml:2: [engine] cuda_graph_sizes: " + why + ", got '4097'");
    CHECK(config_error("[engine]\ncuda_graph_sizes = [1, 2]\n") ==
          "x.toml:2: [engine] cuda_graph_sizes: expected a string, got an array");
    const Config eager = load_config(cmdline({"--enforce-eager", "--cuda-graph-sizes", "2"}));
    CHECK(eager.engine.enforce_eager);
    CHECK(engine_options(eager).graph_sizes.empty());
    CHECK(engine_options(load_config(cmdline({"--cuda-graph-sizes", "2"}))).graph_sizes == std::vector<int>{2});
    CHECK(!load_config(cmdline({"--enforce-eager", "--no-enforce-eager"})).engine.enforce_eager);
    // Accepted with the CPU device too, where nothing is captured.
    CHECK(load_config(cmdline({"--device", "cpu", "--cuda-graph-sizes", "1,2"})).engine.device == "cpu");
    CHECK(usage().find("--cuda-graph-sizes TEXT") != std::string::npos);
    CHECK(usage().find("--[no-]enforce-eager") != std::string::npos);
  }

  TEST_CASE("config: [engine] speculative_config and --speculative-config, as vLLM's JSON: ngram, draft_model or draft_head") {
    CHECK(Config{}.engine.speculative.num_speculative_tokens == 0);
    CHECK(!engine_options(Config{}).speculative);
    const Config c = load_config(cmdline(
        {"--speculative-config",
         R"({"method":"ngram","num_speculative_tokens":5,"prompt_lookup_max":4,"prompt_lookup_min":2})"}));
    CHECK(c.engine.speculative == SpeculativeConfig{"ngram", 5, 2, 4});
    const auto o = engine_options(c).speculative;
    REQUIRE(o);
    CHECK(o->num_speculative_tokens == 5);
    CHECK(o->prompt_lookup_min == 2);
    CHECK(o->prompt_lookup_max == 4);
    // TOML: a string holding the same JSON; an unset bound takes the other's value, 5 when both are unset.
    CHECK(parse_config_toml("[engine]\nspeculative_config = '{\"method\":\"ngram\",\"num_speculative_tokens\":3,"
                            "\"prompt_lookup_max\":3}'\n",
                            "x.toml")
              .engine.speculative == SpeculativeConfig{"ngram", 3, 3, 3});
    CHECK(parse_config_toml("[engine]\nspeculative_config = '{\"method\":\"ngram\",\"num_speculative_tokens\":2}'\n",
                            "x.toml")
              .engine.speculative == SpeculativeConfig{"ngram", 2, 5, 5});
    CHECK(parse_config_toml("[engine]\nspeculative_config = \"\"\n", "x.toml").engine.speculative ==
          SpeculativeConfig{});
    CHECK(config_error("[engine]\nspeculative_config = '{\"method\":\"medusa\",\"num_speculative_tokens\":2}'\n") ==
          "x.toml:2: [engine] speculative_config: method \"medusa\" is not supported; the supported methods are "
          "\"ngram\" (prompt lookup), \"draft_model\" (a smaller model of the same vocabulary) and \"draft_head\" (a "
          "head reading the model's hidden state, tools/train_draft_head.py)");
    CHECK(flag_error({"--speculative-config", R"({"num_speculative_tokens":2})"}) ==
          R"(--speculative-config: "method" must be given as a string; the supported methods are "ngram", "draft_model" and "draft_head")");
    // A draft model, as vLLM names it; "model" alone implies the method.
    const Config dm = load_config(
        cmdline({"--speculative-config", R"({"method":"draft_model","model":"/m/draft.gguf","num_speculative_tokens":4})"}));
    CHECK(dm.engine.speculative == SpeculativeConfig{"draft_model", 4, 0, 0, "/m/draft.gguf"});
    CHECK(engine_options(dm).draft_model == "/m/draft.gguf");
    CHECK(engine_options(dm).speculative->num_speculative_tokens == 4);
    CHECK(engine_options(c).draft_model.empty());
    CHECK(load_config(cmdline({"--speculative-config", R"({"model":"d.gguf","num_speculative_tokens":2})"}))
              .engine.speculative == SpeculativeConfig{"draft_model", 2, 0, 0, "d.gguf"});
    CHECK(flag_error({"--speculative-config", R"({"method":"draft_model","num_speculative_tokens":2})"}) ==
          R"(--speculative-config: method "draft_model" needs "model", the draft model's path)");
    CHECK(flag_error({"--speculative-config", R"({"model":"","num_speculative_tokens":2})"}) ==
          R"(--speculative-config: "model" must be the draft model's or draft head's path as a string)");
    CHECK(flag_error({"--speculative-config", R"({"method":"ngram","model":"d.gguf","num_speculative_tokens":2})"}) ==
          R"(--speculative-config: "model" belongs to methods "draft_model" and "draft_head", not "ngram")");
    // A draft head: the same "model" field names its file.
    const Config dh = load_config(
        cmdline({"--speculative-config", R"({"method":"draft_head","model":"/m/head.gguf","num_speculative_tokens":3})"}));
    CHECK(dh.engine.speculative == SpeculativeConfig{"draft_head", 3, 0, 0, "/m/head.gguf"});
    CHECK(engine_options(dh).draft_head == "/m/head.gguf");
    CHECK(engine_options(dh).draft_model.empty());
    CHECK(engine_options(dm).draft_head.empty());
    CHECK(flag_error({"--speculative-config", R"({"method":"draft_head","num_speculative_tokens":2})"}) ==
          R"(--speculative-config: method "draft_head" needs "model", the draft head's path)");
    // With prompt lookup beside it when either bound is given (the other takes its value).
    CHECK(load_config(cmdline({"--speculative-config", R"({"method":"draft_head","model":"h","num_speculative_tokens":2,)"
                                                       R"("prompt_lookup_max":3})"}))
              .engine.speculative == SpeculativeConfig{"draft_head", 2, 3, 3, "h"});
    CHECK(flag_error({"--speculative-config", R"({"model":"d.gguf","num_speculative_tokens":2,"prompt_lookup_min":1})"}) ==
          R"(--speculative-config: "prompt_lookup_min" belongs to methods "ngram" and "draft_head", not "draft_model")");
    CHECK(flag_error({"--speculative-config", R"({"method":"ngram","num_speculative_tokens":2.5})"}) ==
          R"(--speculative-config: "num_speculative_tokens" must be an integer from 1 to 32, got 2.5E0)");
    CHECK(flag_error({"--speculative-config", R"({"method":"ngram","num_speculative_tokens":3,"prompt_lookup_min":3,)"
                                              R"("prompt_lookup_max":2})"}) ==
          R"(--speculative-config: "prompt_lookup_max" (2) must be at least "prompt_lookup_min" (3))");
    CHECK(flag_error({"--speculative-config", "{"}).starts_with("--speculative-config: must be a JSON object"));
    // A group's workers do not carry drafts yet (a build without Gloo refuses the group first).
    if (INFERD_HAVE_GLOO)
      CHECK(flag_error({"--speculative-config", R"({"method":"ngram","num_speculative_tokens":2})",
                        "--tensor-parallel-size", "2", "--nnodes", "2"}) ==
            "--speculative-config: speculative decoding is not supported with tensor_parallel_size > 1 "
            "(--tensor-parallel-size is 2)");
    CHECK(usage().find("--speculative-config TEXT") != std::string::npos);
  }

  TEST_CASE("config: [engine] load_timeout_s and --load-timeout; 0 scales with the model file's size") {
    CHECK(parse_config_toml("[engine]\nload_timeout_s = 90\n", "x.toml").engine.load_timeout_s == 90.0);
    CHECK(load_config(cmdline({"--load-timeout", "2.5"})).engine.load_timeout_s == 2.5);
    CHECK(config_error("[engine]\nload_timeout_s = -1\n") ==
          "x.toml:2: [engine] load_timeout_s: must be between 0 and 604800, got -1");
    Config c;
    c.engine.load_timeout_s = 7;
    CHECK(load_timeout_s(c) == 7.0);
    c.engine.load_timeout_s = 0;
    c.model.path = "/nonexistent/model.gguf";
    CHECK(load_timeout_s(c) == 60.0);  // unknown size: the floor
    const TempFile small("");
    c.model.path = small.path.string();
    CHECK(load_timeout_s(c) == 60.0);
    std::filesystem::resize_file(small.path, 10'000'000'000);  // sparse: 10 GB at 50 MB/s
    CHECK(load_timeout_s(c) == doctest::Approx(200.0));

    // A checkpoint directory: its safetensors files together, nothing else.
    const auto dir = std::filesystem::temp_directory_path() / ("inferd-ckpt-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    for (const char* name : {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "other.bin"}) {
      std::ofstream(dir / name).put('x');
      std::filesystem::resize_file(dir / name, 6'000'000'000);
    }
    c.model.path = dir.string() + "/";
    CHECK(load_timeout_s(c) == doctest::Approx(240.0));
    CHECK(c.model_name() == dir.filename().string());
    // A checksum manifest is verified first: every byte is read twice.
    std::ofstream(dir / "SHA256SUMS") << "";
    CHECK(load_timeout_s(c) == doctest::Approx(480.0));
    std::filesystem::remove(dir / "SHA256SUMS");
    c.model.manifest = "/elsewhere/SUMS";
    CHECK(load_timeout_s(c) == doctest::Approx(480.0));
    std::filesystem::remove_all(dir);
  }

  TEST_CASE("config: the step deadline's old watchdog_* keys and --watchdog-floor still work, with a warning") {
    Config c = parse_config_toml("[health]\nwatchdog_interval_ms = 40\nwatchdog_floor_s = 2.5\n"
                                 "watchdog_p99_factor = 4\n",
                                 "x.toml");
    std::sort(c.deprecated.begin(), c.deprecated.end());  // a table's keys come in name order
    CHECK(c.health.step_deadline_interval_ms == 40);
    CHECK(c.health.step_deadline_floor_s == 2.5);
    CHECK(c.health.step_deadline_p99_factor == 4);
    CHECK(c.deprecated == std::vector<std::string>{
                              "x.toml:2: [health] watchdog_interval_ms: deprecated name; call it step_deadline_interval_ms",
                              "x.toml:3: [health] watchdog_floor_s: deprecated name; call it step_deadline_floor_s",
                              "x.toml:4: [health] watchdog_p99_factor: deprecated name; call it step_deadline_p99_factor"});
    const Config f = load_config(cmdline({"--watchdog-floor", "1.5"}));
    CHECK(f.health.step_deadline_floor_s == 1.5);
    CHECK(f.deprecated == std::vector<std::string>{"--watchdog-floor: deprecated name; use --step-deadline-floor"});
    CHECK(parse_config_toml("[health]\nstep_deadline_floor_s = 2.5\n", "x.toml").deprecated.empty());
    CHECK(usage().find("--watchdog-floor") == std::string::npos);
    CHECK(config_error("[health]\nwatchdog_interval_ms = -1\n").find("watchdog_interval_ms: must be between") !=
          std::string::npos);
  }

  TEST_CASE("config: the admin key comes from a file, and errors never show it") {
    TempFile file("  adm-s3cret\n");
    const std::string path = file.path.string();
    Config c = load_config(cmdline({"--admin-api-key-file", path, "--admin-port", "9100", "--admin-socket", "/run/a.sock"}));
    CHECK(c.server.admin_api_key == "adm-s3cret");
    CHECK(c.server.admin_port == 9100);
    CHECK(c.server.admin_socket == "/run/a.sock");
    c = parse_config_toml("[server]\nadmin_api_key_file = \"" + path + "\"\n", "x.toml");
    CHECK(c.server.admin_api_key == "adm-s3cret");
    CHECK(load_config(cmdline({"--admin-api-key", "k2"})).server.admin_api_key == "k2");
    CHECK(Config{}.server.admin_api_key.empty());
    CHECK(Config{}.server.admin_port == 0);

    CHECK(flag_error({"--admin-api-key-file", path, "--admin-api-key", "k2"}) ==
          "--admin-api-key-file: set admin_api_key or admin_api_key_file, not both (--admin-api-key is set too)");
    CHECK(flag_error({"--admin-api-key-file", "/nonexistent/key"}) ==
          "--admin-api-key-file: cannot read /nonexistent/key: No such file or directory");
    CHECK(flag_error({"--admin-api-key-file", path, "--api-key", "adm-s3cret"}) ==
          "--admin-api-key-file: the admin key must differ from api_key, which every API client holds");
    CHECK(config_error("[server]\napi_key = \"same\"\nadmin_api_key = \"same\"\n") ==
          "x.toml:3: [server] admin_api_key: the admin key must differ from api_key, which every API client holds");
    CHECK(flag_error({"--admin-api-key", "two words"}) ==
          "--admin-api-key: the key must be one line of printable characters without spaces");
    TempFile blank("\n\n");
    CHECK(flag_error({"--admin-api-key-file", blank.path.string()}) ==
          "--admin-api-key-file: the key in " + blank.path.string() + " is empty");
    TempFile two("adm-s3cret\nsecond line\n");
    CHECK(flag_error({"--admin-api-key-file", two.path.string()}) ==
          "--admin-api-key-file: the key in " + two.path.string() +
              " must be one line of printable characters without spaces");
    CHECK(flag_error({"--admin-port", "70000"}) == "--admin-port: must be between 0 and 65535, got 70000");
    CHECK(flag_error({"--admin-socket", std::string(200, 'a')}).starts_with(
        "--admin-socket: a Unix socket path must be shorter than 108 bytes"));
  }

  TEST_CASE("config: --help lists every flag") {
    const std::string u = usage();
    for (const char* flag : {"--host", "--port", "--model", "--served-model-name", "--tensor-parallel-size",
                             "--max-model-len", "--max-num-seqs", "--max-num-batched-tokens", "--gpu-memory-utilization",
                             "--api-key", "--block-size", "--[no-]enable-prefix-caching", "--nnodes", "--node-rank",
                             "--master-addr", "--master-port", "--[no-]headless", "--threads", "--log-level", "--config",
                             "--help", "--version", "--admin-api-key-file", "--admin-api-key", "--admin-port",
                             "--admin-socket", "--model-manifest"})
      CHECK_MESSAGE(u.find(flag) != std::string::npos, flag);
  }
}
