#include "daemon/config.hpp"

#include <sys/un.h>

#include <fmt/format.h>
#include <toml++/toml.h>

#include <boost/json.hpp>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <algorithm>
#include <map>
#include <optional>
#include <sstream>
#include <variant>

#include "faults/fault_points.hpp"
#include "daemon/monitor_settings.hpp"
#include "daemon/reasoning_parser.hpp"
#include "daemon/tool_call_parser.hpp"
#include "kernels/backend_factory.hpp"
#include "inferd_config.h"

namespace inferd::daemon {

namespace {

using Value = std::variant<bool, int64_t, double, std::string>;
enum class Kind { Bool, Int, Float, String };

std::string_view kind_name(Kind k) {
  switch (k) {
    case Kind::Bool: return "a boolean";
    case Kind::Int: return "an integer";
    case Kind::Float: return "a number";
    case Kind::String: return "a string";
  }
  return "?";
}

// One configuration key: where it lives, its flag, and how it is checked and stored.
struct Key {
  std::string_view section;
  std::string_view name;
  std::string_view flag;  // without "--"; empty when the key has no flag
  Kind kind;
  std::string_view help;
  // Checks the value and stores it; returns the problem, or "" when it was stored.
  std::function<std::string(Config&, const Value&)> apply;
};

template <class S, class T>
Key int_key(std::string_view section, std::string_view name, std::string_view flag, S Config::*sec, T S::*field,
            int64_t lo, int64_t hi, std::string_view help, std::string (*extra)(int64_t) = nullptr) {
  return {section, name, flag, Kind::Int, help, [=](Config& c, const Value& v) -> std::string {
            const int64_t n = std::get<int64_t>(v);
            if (n < lo || n > hi) return fmt::format("must be between {} and {}, got {}", lo, hi, n);
            if (extra) {
              if (std::string why = extra(n); !why.empty()) return why;
            }
            (c.*sec).*field = static_cast<T>(n);
            return {};
          }};
}

template <class S>
Key bool_key(std::string_view section, std::string_view name, std::string_view flag, S Config::*sec,
             bool S::*field, std::string_view help) {
  return {section, name, flag, Kind::Bool, help, [=](Config& c, const Value& v) -> std::string {
            (c.*sec).*field = std::get<bool>(v);
            return {};
          }};
}

template <class S>
Key float_key(std::string_view section, std::string_view name, std::string_view flag, S Config::*sec,
              double S::*field, double lo, double hi, std::string_view help) {
  return {section, name, flag, Kind::Float, help, [=](Config& c, const Value& v) -> std::string {
            const double x = std::get<double>(v);
            if (!(x >= lo && x <= hi)) return fmt::format("must be between {} and {}, got {}", lo, hi, x);
            (c.*sec).*field = x;
            return {};
          }};
}

// "warn,shed,critical": three ascending percentages, for PSI thresholds.
Key psi_key(std::string_view name, std::array<double, 3> HealthConfig::*field) {
  return {"health", name, "", Kind::String, "", [=](Config& c, const Value& v) -> std::string {
            const auto& s = std::get<std::string>(v);
            std::array<double, 3> t{};
            const char* p = s.c_str();
            for (int i = 0; i < 3; ++i) {
              char* end = nullptr;
              t[i] = std::strtod(p, &end);
              if (end == p || (i < 2 && *end != ',') || (i == 2 && *end != '\0') || t[i] < 0 || t[i] > 100 ||
                  (i > 0 && t[i] < t[i - 1]))
                return fmt::format("must be three ascending percentages \"warn,shed,critical\", got '{}'", s);
              p = end + 1;
            }
            c.health.*field = t;
            return {};
          }};
}

// `check` may normalise the string in place; it returns the problem or "".
template <class S>
Key string_key(std::string_view section, std::string_view name, std::string_view flag, S Config::*sec,
               std::string S::*field, std::string_view help, std::string (*check)(std::string&) = nullptr) {
  return {section, name, flag, Kind::String, help, [=](Config& c, const Value& v) -> std::string {
            std::string s = std::get<std::string>(v);
            if (check) {
              if (std::string why = check(s); !why.empty()) return why;
            }
            (c.*sec).*field = std::move(s);
            return {};
          }};
}

std::string not_empty(std::string& s) { return s.empty() ? "must not be empty" : ""; }

std::string tool_call_parser_name(std::string& s) {
  if (known_tool_call_parser(s)) return {};
  return fmt::format("'{}' is not implemented; implemented: {} (empty: the chat template's format)", s,
                     kToolCallParsers);
}

std::string reasoning_parser_name(std::string& s) {
  if (reasoning_format(s)) return {};
  return fmt::format("'{}' is not implemented; implemented: {} (empty: the chat template's format)", s,
                     kReasoningParsers);
}

// What is wrong with a key, never the key itself: errors reach logs.
std::string admin_key_problem(std::string_view key) {
  if (key.empty()) return "is empty";
  for (char c : key)
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f)
      return "must be one line of printable characters without spaces";
  return {};
}

std::string admin_key_text(std::string& s) {
  if (s.empty()) return {};  // no admin key
  const std::string why = admin_key_problem(s);
  return why.empty() ? why : "the key " + why;
}

std::string unix_socket_path(std::string& s) {
  if (s.size() >= sizeof(sockaddr_un::sun_path))
    return fmt::format("a Unix socket path must be shorter than {} bytes, got {}", sizeof(sockaddr_un::sun_path),
                       s.size());
  return {};
}

std::string power_of_two(int64_t n) {
  return (n & (n - 1)) == 0 ? "" : fmt::format("must be a power of two, got {}", n);
}

// "" means the default location; a leading "~/" is the home directory.
std::string model_path(std::string& s) {
  if (s.empty()) {
    s = default_model_path();
  } else if (s.starts_with("~/")) {
    const char* home = std::getenv("HOME");
    if (home == nullptr || *home == '\0') return "cannot expand '~': HOME is not set";
    s = std::string(home) + s.substr(1);
  }
  return {};
}

// A leading "~/" is $HOME; empty stays empty.
std::string home_path(std::string& s) {
  if (!s.starts_with("~/")) return {};
  const char* home = std::getenv("HOME");
  if (home == nullptr || *home == '\0') return "cannot expand '~': HOME is not set";
  s = std::string(home) + s.substr(1);
  return {};
}

// Checked when the file is read, so a bad pattern is a configuration error
// naming its place, not a failure once the supervisor starts.
std::string log_patterns(std::string& s) {
  try {
    parse_log_patterns(s);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return {};
}

std::string device_name(std::string& s) { return kernels::device_error(s); }

std::string warmup_depth(std::string& s) {
  if (s == "full" || s == "least") return {};
  return fmt::format("must be full or least, got '{}'", s);
}

std::string log_level(std::string& s) {
  for (std::string_view known : {"trace", "debug", "info", "warn", "error", "critical", "off"})
    if (s == known) return {};
  return fmt::format("must be one of trace, debug, info, warn, error, critical, off, got '{}'", s);
}

Key log_target_key() {
  return {"log", "target", "", Kind::String, "", [](Config& c, const Value& v) -> std::string {
            const auto& s = std::get<std::string>(v);
            if (s == "auto") c.log.target = LogTarget::Auto;
            else if (s == "stderr") c.log.target = LogTarget::Stderr;
            else if (s == "journald") c.log.target = LogTarget::Journald;
            else return fmt::format("must be one of auto, stderr, journald, got '{}'", s);
            return {};
          }};
}

// "1, 2,4": integers in [lo, hi] separated by commas (spaces around each allowed);
// "" or only spaces: none. nullopt when any item is not such an integer.
std::optional<std::vector<int>> int_list(const std::string& s, int lo, int hi) {
  std::vector<int> out;
  for (size_t at = 0; s.find_first_not_of(' ') != std::string::npos && at <= s.size();) {
    const size_t end = std::min(s.find(',', at), s.size());
    const char *first = s.data() + at, *last = s.data() + end;
    while (first < last && *first == ' ') ++first;
    while (last > first && last[-1] == ' ') --last;
    int n = 0;
    auto [p, ec] = std::from_chars(first, last, n);
    if (ec != std::errc() || p != last || n < lo || n > hi) return std::nullopt;
    out.push_back(n);
    at = end + 1;
  }
  return out;
}

// "1,2,4,8": the decode batch sizes captured as CUDA graphs, in any order; "" for none.
Key cuda_graph_sizes_key() {
  return {"engine", "cuda_graph_sizes", "cuda-graph-sizes", Kind::String,
          "decode batch sizes run as CUDA graphs, e.g. 1,2,4,8 (no effect on the CPU)",
          [](Config& c, const Value& v) -> std::string {
            const auto& s = std::get<std::string>(v);
            auto list = int_list(s, 1, 4096);
            if (!list)
              return fmt::format("must be batch sizes from 1 to 4096 separated by commas, like \"1,2,4,8\" "
                                 "(\"\" for none), got '{}'",
                                 s);
            std::vector<int> sizes = std::move(*list);
            std::sort(sizes.begin(), sizes.end());
            sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
            c.engine.cuda_graph_sizes = std::move(sizes);
            return {};
          }};
}

// "0,1": the CUDA devices the gpu monitor watches; "" for the engine's own.
Key gpu_devices_key() {
  return {"health", "gpu_devices", "", Kind::String, "",
          [](Config& c, const Value& v) -> std::string {
            const auto& s = std::get<std::string>(v);
            auto list = int_list(s, 0, 1023);
            if (!list)
              return fmt::format("must be CUDA device indices separated by commas, like \"0,1\" "
                                 "(\"\" for the engine's own), got '{}'",
                                 s);
            std::vector<int> gpus;
            for (int n : *list)
              if (std::find(gpus.begin(), gpus.end(), n) == gpus.end()) gpus.push_back(n);
            c.health.gpu_devices = std::move(gpus);
            return {};
          }};
}

// vLLM's --speculative-config: a JSON object, e.g.
// {"method":"ngram","num_speculative_tokens":5,"prompt_lookup_max":4,"prompt_lookup_min":2}
// or {"method":"draft_model","model":"draft.gguf","num_speculative_tokens":5}
// (as in vLLM, "model" alone implies "draft_model") or {"method":"draft_head",
// "model":"head.gguf","num_speculative_tokens":3}; "" for none. As in vLLM, an
// unset lookup bound takes the other's value, and 5 when both are unset.
std::string parse_speculative(const std::string& text, SpeculativeConfig& out) {
  out = {};
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) return {};
  boost::system::error_code ec;
  const boost::json::value v = boost::json::parse(text, ec);
  if (ec || !v.is_object()) return fmt::format("must be a JSON object like {{\"method\":\"ngram\",\"num_speculative_tokens\":5}}, got '{}'", text);
  const auto& o = v.as_object();
  auto int_field = [&](std::string_view name, int lo, int hi, int& dst) -> std::string {
    const auto* f = o.if_contains(name);
    if (f == nullptr) return {};
    if (!f->is_int64() || f->as_int64() < lo || f->as_int64() > hi)
      return fmt::format("\"{}\" must be an integer from {} to {}, got {}", name, lo, hi, boost::json::serialize(*f));
    dst = static_cast<int>(f->as_int64());
    return {};
  };
  for (const auto& [k, val] : o)
    if (k != "method" && k != "model" && k != "num_speculative_tokens" && k != "prompt_lookup_min" &&
        k != "prompt_lookup_max")
      return fmt::format("unknown field \"{}\" (known: method, model, num_speculative_tokens, prompt_lookup_min, "
                         "prompt_lookup_max)", std::string_view(k));
  const auto* m = o.if_contains("method");
  const auto* model = o.if_contains("model");
  if (model != nullptr && (!model->is_string() || model->as_string().empty()))
    return "\"model\" must be the draft model's or draft head's path as a string";
  if (m == nullptr && model == nullptr)
    return "\"method\" must be given as a string; the supported methods are \"ngram\", \"draft_model\" and "
           "\"draft_head\"";
  if (m != nullptr && !m->is_string())
    return "\"method\" must be a string; the supported methods are \"ngram\", \"draft_model\" and \"draft_head\"";
  const std::string method = m != nullptr ? std::string(m->as_string()) : "draft_model";
  if (method != "ngram" && method != "draft_model" && method != "draft_head")
    return fmt::format("method \"{}\" is not supported; the supported methods are \"ngram\" (prompt lookup), "
                       "\"draft_model\" (a smaller model of the same vocabulary) and \"draft_head\" (a head "
                       "reading the model's hidden state, tools/train_draft_head.py)", method);
  out.method = method;
  if (!o.contains("num_speculative_tokens")) return "\"num_speculative_tokens\" is required";
  if (auto e = int_field("num_speculative_tokens", 1, 32, out.num_speculative_tokens); !e.empty()) return e;
  if (method != "ngram") {
    if (model == nullptr)
      return fmt::format("method \"{}\" needs \"model\", the {}'s path", method,
                         method == "draft_model" ? "draft model" : "draft head");
    out.model = std::string(model->as_string());
    if (method == "draft_model") {
      for (const char* k : {"prompt_lookup_min", "prompt_lookup_max"})
        if (o.contains(k)) return fmt::format("\"{}\" belongs to methods \"ngram\" and \"draft_head\", not \"{}\"", k, method);
      return {};
    }
  } else if (model != nullptr) {
    return "\"model\" belongs to methods \"draft_model\" and \"draft_head\", not \"ngram\"";
  }
  for (auto e : {int_field("prompt_lookup_min", 1, 1024, out.prompt_lookup_min),
                 int_field("prompt_lookup_max", 1, 1024, out.prompt_lookup_max)})
    if (!e.empty()) return e;
  // A draft head looks up only when asked to (either bound given).
  if (method == "draft_head" && out.prompt_lookup_min == 0 && out.prompt_lookup_max == 0) return {};
  if (out.prompt_lookup_min == 0 && out.prompt_lookup_max == 0) out.prompt_lookup_min = out.prompt_lookup_max = 5;
  if (out.prompt_lookup_min == 0) out.prompt_lookup_min = out.prompt_lookup_max;
  if (out.prompt_lookup_max == 0) out.prompt_lookup_max = out.prompt_lookup_min;
  if (out.prompt_lookup_max < out.prompt_lookup_min)
    return fmt::format("\"prompt_lookup_max\" ({}) must be at least \"prompt_lookup_min\" ({})", out.prompt_lookup_max,
                       out.prompt_lookup_min);
  return {};
}

Key speculative_config_key() {
  return {"engine", "speculative_config", "speculative-config", Kind::String,
          "speculative decoding as JSON: {\"method\":\"ngram\",\"num_speculative_tokens\":5,"
          "\"prompt_lookup_max\":4,\"prompt_lookup_min\":2} (prompt lookup) or {\"method\":\"draft_model\","
          "\"model\":\"draft.gguf\",\"num_speculative_tokens\":5} (a smaller model of the same vocabulary) or "
          "{\"method\":\"draft_head\",\"model\":\"head.gguf\",\"num_speculative_tokens\":3} (a head reading the "
          "model's hidden state, CPU only)",
          [](Config& c, const Value& v) -> std::string {
            SpeculativeConfig sc;
            std::string err = parse_speculative(std::get<std::string>(v), sc);
            if (err.empty()) c.engine.speculative = sc;
            return err;
          }};
}

Key gpu_memory_utilization_key() {
  return {"engine", "gpu_memory_utilization", "gpu-memory-utilization", Kind::Float,
          "with --device cuda: share of the GPU's memory the process may use; the KV cache gets what the weights "
          "and a step's buffers leave of it",
          [](Config& c, const Value& v) -> std::string {
            const double x = std::get<double>(v);
            if (!(x > 0.0 && x <= 1.0)) return fmt::format("must be greater than 0 and at most 1, got {}", x);
            c.engine.gpu_memory_utilization = x;
            return {};
          }};
}

const std::vector<Key>& keys() {
  using C = Config;
  static const std::vector<Key> table = {
      string_key("server", "host", "host", &C::server, &ServerConfig::host, "address to listen on", not_empty),
      int_key("server", "port", "port", &C::server, &ServerConfig::port, 1, 65535, "port to listen on"),
      string_key("server", "api_key", "api-key", &C::server, &ServerConfig::api_key,
                 "require 'Authorization: Bearer KEY' on the API"),
      string_key("server", "admin_api_key", "admin-api-key", &C::server, &ServerConfig::admin_api_key,
                 "require 'Authorization: Bearer KEY' on the admin routes (prefer the file)", admin_key_text),
      string_key("server", "admin_api_key_file", "admin-api-key-file", &C::server, &ServerConfig::admin_api_key_file,
                 "file holding the admin routes' key"),
      int_key("server", "admin_port", "admin-port", &C::server, &ServerConfig::admin_port, 0, 65535,
              "admin listener on 127.0.0.1:N; 0: none"),
      string_key("server", "admin_socket", "admin-socket", &C::server, &ServerConfig::admin_socket,
                 "admin listener on a Unix socket at PATH", unix_socket_path),
      string_key("server", "served_model_name", "served-model-name", &C::server, &ServerConfig::served_model_name,
                 "model name the API reports and accepts"),
      string_key("server", "tool_call_parser", "tool-call-parser", &C::server, &ServerConfig::tool_call_parser,
                 "how tool calls are read from the output: hermes, mistral, llama3_json, deepseek_v32 or deepseek_v4; "
                 "empty: the chat template's format",
                 tool_call_parser_name),
      string_key("server", "reasoning_parser", "reasoning-parser", &C::server, &ServerConfig::reasoning_parser,
                 "split reasoning_content from the answer: deepseek_r1, qwen3 or deepseek_v4; empty: the chat "
                 "template's format (deepseek_v4 for DeepSeek-V4's), else no split",
                 reasoning_parser_name),
      int_key("server", "max_body_bytes", "", &C::server, &ServerConfig::max_body_bytes, 1024, int64_t{1} << 30, ""),
      int_key("server", "idle_timeout_s", "", &C::server, &ServerConfig::idle_timeout_s, 1, 3600, ""),
      int_key("server", "request_timeout_s", "", &C::server, &ServerConfig::request_timeout_s, 1, 86400, ""),
      int_key("server", "io_threads", "", &C::server, &ServerConfig::io_threads, 1, 256, ""),
      int_key("server", "work_threads", "", &C::server, &ServerConfig::work_threads, 1, 256, ""),
      int_key("server", "max_connections", "max-connections", &C::server, &ServerConfig::max_connections, 1, 1000000,
              "open connections beyond which new ones are answered 503"),
      int_key("server", "drain_timeout_s", "", &C::server, &ServerConfig::drain_timeout_s, 0, 3600, ""),
      string_key("model", "path", "model", &C::model, &ModelConfig::path, "model: a GGUF file, or a Hugging Face checkpoint directory (Llama, safetensors)", model_path),
      int_key("model", "max_model_len", "max-model-len", &C::model, &ModelConfig::max_model_len, 0, int64_t{1} << 24,
              "context length; 0 takes the model's"),
      string_key("model", "manifest", "model-manifest", &C::model, &ModelConfig::manifest,
                 "sha256sum manifest the model's files must match before loading; empty: DIR/SHA256SUMS or "
                 "FILE.gguf.sha256 when there",
                 home_path),
      string_key("model", "chat_template", "chat-template", &C::model, &ModelConfig::chat_template,
                 "Jinja chat template file used instead of the model's own (tokenizer.chat_template); empty: the "
                 "model's",
                 home_path),
      string_key("engine", "device", "device", &C::engine, &EngineConfig::device,
                 "where the model runs: cpu, cuda or cuda:N (builds with CUDA)", device_name),
      int_key("engine", "threads", "threads", &C::engine, &EngineConfig::threads, 0, 1024,
              "compute threads; 0 uses every core"),
      int_key("engine", "max_num_seqs", "max-num-seqs", &C::engine, &EngineConfig::max_num_seqs, 1, 4096,
              "most sequences in one step"),
      int_key("engine", "max_num_batched_tokens", "max-num-batched-tokens", &C::engine,
              &EngineConfig::max_num_batched_tokens, 1, 1 << 20, "most tokens in one step"),
      int_key("engine", "max_waiting", "max-waiting", &C::engine, &EngineConfig::max_waiting, 1, 1 << 20,
              "most requests queued for a step; more answer 429"),
      int_key("engine", "block_size", "block-size", &C::engine, &EngineConfig::block_size, 1, 1024,
              "tokens per KV cache block", power_of_two),
      bool_key("engine", "enable_prefix_caching", "enable-prefix-caching", &C::engine,
               &EngineConfig::enable_prefix_caching, "reuse KV blocks of shared prompt prefixes"),
      float_key("engine", "load_timeout_s", "load-timeout", &C::engine, &EngineConfig::load_timeout_s, 0, 604800,
                "seconds the model load may take before inferd exits 1; 0: max(60, file size / 50 MB/s)"),
      gpu_memory_utilization_key(),
      cuda_graph_sizes_key(),
      speculative_config_key(),
      bool_key("engine", "enforce_eager", "enforce-eager", &C::engine, &EngineConfig::enforce_eager,
               "run every step eagerly: no CUDA graphs"),
      int_key("engine", "tensor_parallel_size", "tensor-parallel-size", &C::engine, &EngineConfig::tensor_parallel_size,
              1, 1024, "ranks a model is split across"),
      int_key("parallel", "nnodes", "nnodes", &C::parallel, &ParallelConfig::nnodes, 1, 1024, "number of nodes"),
      int_key("parallel", "node_rank", "node-rank", &C::parallel, &ParallelConfig::node_rank, 0, 1023,
              "this node's rank; 0 is the head"),
      string_key("parallel", "master_addr", "master-addr", &C::parallel, &ParallelConfig::master_addr,
                 "head node's address", not_empty),
      int_key("parallel", "master_port", "master-port", &C::parallel, &ParallelConfig::master_port, 1, 65535,
              "head node's control-plane port"),
      bool_key("parallel", "headless", "headless", &C::parallel, &ParallelConfig::headless,
               "run as a worker rank: no inference API, only health, metrics and admin routes"),
      string_key("log", "level", "log-level", &C::log, &LogConfig::level,
                 "trace, debug, info, warn, error, critical or off", log_level),
      log_target_key(),
      bool_key("warmup", "enable", "warmup", &C::warmup, &warmup::WarmupOptions::enable,
               "run the four-phase warm-up before serving"),
      string_key("warmup", "depth", "warmup-depth", &C::warmup, &warmup::WarmupOptions::depth,
                 "full: the seed profile's lengths; least: every shape key touched with the least work, as a "
                 "recovery's re-warm (a faster start that proves no sustained decode)",
                 warmup_depth),
      int_key("warmup", "retries", "warmup-retries", &C::warmup, &warmup::WarmupOptions::retries, 0, 100,
              "failed warm-ups retried before start-up fails"),
      float_key("warmup", "retry_delay_s", "", &C::warmup, &warmup::WarmupOptions::retry_delay_s, 0, 3600, ""),
      float_key("warmup", "phase_timeout_s", "", &C::warmup, &warmup::WarmupOptions::phase_timeout_s, 1, 86400, ""),
      int_key("warmup", "ramp_max_tokens", "", &C::warmup, &warmup::WarmupOptions::ramp_max_tokens, 1, 1 << 20, ""),
      int_key("warmup", "burst_requests", "", &C::warmup, &warmup::WarmupOptions::burst_requests, 0, 4096, ""),
      int_key("warmup", "burst_prompt_tokens", "", &C::warmup, &warmup::WarmupOptions::burst_prompt_tokens, 0,
              1 << 24, ""),
      int_key("warmup", "long_requests", "", &C::warmup, &warmup::WarmupOptions::long_requests, 1, 4096, ""),
      int_key("warmup", "long_prompt_tokens", "", &C::warmup, &warmup::WarmupOptions::long_prompt_tokens, 0, 1 << 24,
              ""),
      int_key("warmup", "long_max_tokens", "", &C::warmup, &warmup::WarmupOptions::long_max_tokens, 1, 1 << 20, ""),
      int_key("warmup", "sustained_prompt_tokens", "", &C::warmup, &warmup::WarmupOptions::sustained_prompt_tokens,
              1, 1 << 24, ""),
      bool_key("health", "enable", "supervise", &C::health, &HealthConfig::enable,
               "watch pressure, error lines, heartbeats and generation probes, and recover"),
      int_key("health", "interval_ms", "health-interval-ms", &C::health, &HealthConfig::interval_ms, 10, 60000,
              "how often the supervisor samples its monitors"),
      int_key("health", "psi_interval_ms", "", &C::health, &HealthConfig::psi_interval_ms, 0, 60000, ""),
      int_key("health", "meminfo_interval_ms", "", &C::health, &HealthConfig::meminfo_interval_ms, 0, 60000, ""),
      int_key("health", "process_interval_ms", "", &C::health, &HealthConfig::process_interval_ms, 0, 60000, ""),
      int_key("health", "log_interval_ms", "", &C::health, &HealthConfig::log_interval_ms, 0, 60000, ""),
      int_key("health", "step_deadline_interval_ms", "", &C::health, &HealthConfig::step_deadline_interval_ms, 0, 60000,
              ""),
      int_key("health", "gpu_interval_ms", "", &C::health, &HealthConfig::gpu_interval_ms, 0, 60000, ""),
      gpu_devices_key(),
      string_key("health", "procfs_root", "procfs-root", &C::health, &HealthConfig::procfs_root,
                 "where /proc is read from", not_empty),
      bool_key("health", "capture_stderr", "", &C::health, &HealthConfig::capture_stderr, ""),
      string_key("health", "log_patterns", "", &C::health, &HealthConfig::log_patterns, "", log_patterns),
      float_key("health", "probe_interval_s", "probe-interval", &C::health, &HealthConfig::probe_interval_s, 0, 86400,
                "seconds between generation probes; 0: on demand only"),
      int_key("health", "probe_budget_ms", "", &C::health, &HealthConfig::probe_budget_ms, 10, 3600000, ""),
      float_key("health", "step_deadline_floor_s", "step-deadline-floor", &C::health,
                &HealthConfig::step_deadline_floor_s, 0.01, 86400,
                "shortest step deadline before a wedge is suspected"),
      float_key("health", "step_deadline_p99_factor", "", &C::health, &HealthConfig::step_deadline_p99_factor, 1, 1e6,
                ""),
      int_key("health", "mem_warn_bytes", "", &C::health, &HealthConfig::mem_warn_bytes, 0, int64_t{1} << 50, ""),
      float_key("health", "mem_warn_fraction", "", &C::health, &HealthConfig::mem_warn_fraction, 0, 1, ""),
      int_key("health", "mem_shed_bytes", "", &C::health, &HealthConfig::mem_shed_bytes, 0, int64_t{1} << 50, ""),
      float_key("health", "mem_shed_fraction", "", &C::health, &HealthConfig::mem_shed_fraction, 0, 1, ""),
      int_key("health", "mem_critical_bytes", "", &C::health, &HealthConfig::mem_critical_bytes, 0, int64_t{1} << 50,
              ""),
      float_key("health", "mem_critical_fraction", "", &C::health, &HealthConfig::mem_critical_fraction, 0, 1, ""),
      int_key("health", "min_available_bytes", "", &C::health, &HealthConfig::min_available_bytes, 0,
              int64_t{1} << 50, ""),
      psi_key("psi_some_avg10", &HealthConfig::psi_some_avg10),
      psi_key("psi_full_avg10", &HealthConfig::psi_full_avg10),
      psi_key("psi_some_avg60", &HealthConfig::psi_some_avg60),
      psi_key("psi_full_avg60", &HealthConfig::psi_full_avg60),
      float_key("health", "rss_growth_warn", "", &C::health, &HealthConfig::rss_growth_warn, 0, 1000, ""),
      int_key("health", "calm_samples_to_unshed", "", &C::health, &HealthConfig::calm_samples_to_unshed, 1, 100000,
              ""),
      int_key("health", "max_recoveries", "max-recoveries", &C::health, &HealthConfig::max_recoveries, 0, 1000,
              "recoveries allowed in recovery_window_s before the process fails"),
      int_key("health", "recovery_window_s", "", &C::health, &HealthConfig::recovery_window_s, 1, 86400 * 7, ""),
      int_key("health", "reset_timeout_ms", "", &C::health, &HealthConfig::reset_timeout_ms, 10, 3600000, ""),
      int_key("warmup", "sustained_max_tokens", "", &C::warmup, &warmup::WarmupOptions::sustained_max_tokens, 1,
              1 << 20, ""),
      string_key("fabric", "sysfs_root", "sysfs-root", &C::fabric, &FabricConfig::sysfs_root,
                 "where /sys is read from for the RDMA fabric pre-flight", not_empty),
      string_key("fabric", "interface", "", &C::fabric, &FabricConfig::interface, ""),
      float_key("fabric", "link_downed_warn_per_s", "", &C::fabric, &FabricConfig::link_downed_warn_per_s, 0, 1048576, ""),
      float_key("fabric", "errors_warn_per_s", "", &C::fabric, &FabricConfig::errors_warn_per_s, 0, 1048576, ""),
  };
  return table;
}

// Keys (and their flags) read under an old name, each with a warning: the step
// deadline monitor's keys said "watchdog", which is systemd's WATCHDOG=1.
struct Renamed {
  std::string_view section, old_name, name, old_flag;
};
constexpr Renamed kRenamed[] = {
    {"health", "watchdog_interval_ms", "step_deadline_interval_ms", ""},
    {"health", "watchdog_floor_s", "step_deadline_floor_s", "watchdog-floor"},
    {"health", "watchdog_p99_factor", "step_deadline_p99_factor", ""},
};

const Renamed* renamed_key(std::string_view section, std::string_view old_name) {
  for (const Renamed& r : kRenamed)
    if (r.section == section && r.old_name == old_name) return &r;
  return nullptr;
}

const Renamed* renamed_flag(std::string_view old_flag) {
  for (const Renamed& r : kRenamed)
    if (!r.old_flag.empty() && r.old_flag == old_flag) return &r;
  return nullptr;
}

constexpr std::string_view kSections[] = {"server", "model", "engine", "parallel", "log", "warmup", "health", "fabric"};

const Key* find_key(std::string_view section, std::string_view name) {
  for (const Key& k : keys())
    if (k.section == section && k.name == name) return &k;
  return nullptr;
}

// Also finds a key by its old flag (see kRenamed).
const Key* find_flag(std::string_view flag) {
  for (const Key& k : keys())
    if (!k.flag.empty() && k.flag == flag) return &k;
  if (const Renamed* r = renamed_flag(flag)) return find_key(r->section, r->name);
  return nullptr;
}

// Where each key's value came from ("file:7: [engine] max_num_seqs" or "--max-num-seqs"),
// so checks that span keys can point at the right place.
using Origins = std::map<std::string, std::string, std::less<>>;

std::string id(const Key& k) { return fmt::format("{}.{}", k.section, k.name); }

void apply(Config& cfg, const Key& k, const Value& v, std::string origin, Origins& origins) {
  if (std::string why = k.apply(cfg, v); !why.empty()) throw ConfigError(fmt::format("{}: {}", origin, why));
  origins[id(k)] = std::move(origin);
}

std::string_view toml_type_name(toml::node_type t) {
  switch (t) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a floating-point number";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    default: return "a date or time";
  }
}

// The value of `node` as `kind` wants it; empty when the TOML type does not fit.
std::optional<Value> from_toml(const toml::node& node, Kind kind) {
  switch (kind) {
    case Kind::Bool:
      if (auto b = node.value_exact<bool>()) return *b;
      break;
    case Kind::Int:
      if (auto i = node.value_exact<int64_t>()) return *i;
      break;
    case Kind::Float:
      if (node.is_floating_point()) return *node.value_exact<double>();
      if (auto i = node.value_exact<int64_t>()) return static_cast<double>(*i);
      break;
    case Kind::String:
      if (auto s = node.value_exact<std::string>()) return *s;
      break;
  }
  return std::nullopt;
}

void apply_toml(Config& cfg, std::string_view text, std::string_view source, Origins& origins) {
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    throw ConfigError(fmt::format("{}:{}: invalid TOML: {}", source, e.source().begin.line, e.description()));
  }
  for (auto&& [section_key, section_node] : root) {
    const std::string_view section = section_key.str();
    const auto* table = section_node.as_table();
    if (table == nullptr) {
      throw ConfigError(fmt::format("{}:{}: {}: keys belong in a section ([server], [model], [engine], "
                                    "[parallel], [log], [warmup], [health] or [fabric])",
                                    source, section_key.source().begin.line, section));
    }
    if (std::find(std::begin(kSections), std::end(kSections), section) == std::end(kSections)) {
      throw ConfigError(fmt::format("{}:{}: [{}]: unknown section (known: server, model, engine, parallel, log, warmup, health, fabric)",
                                    source, section_key.source().begin.line, section));
    }
    for (auto&& [key, node] : *table) {
      const auto line = key.source().begin.line;
      const std::string where = fmt::format("{}:{}: [{}] {}", source, line, section, key.str());
      const Key* k = find_key(section, key.str());
      if (const Renamed* r = k ? nullptr : renamed_key(section, key.str())) {
        k = find_key(section, r->name);
        cfg.deprecated.push_back(fmt::format("{}: deprecated name; call it {}", where, r->name));
      }
      if (k == nullptr) throw ConfigError(where + ": unknown key");
      auto value = from_toml(node, k->kind);
      if (!value) {
        throw ConfigError(fmt::format("{}: expected {}, got {}", where, kind_name(k->kind), toml_type_name(node.type())));
      }
      apply(cfg, *k, *value, where, origins);
    }
  }
}

Value from_flag(const Key& k, std::string_view flag, std::string_view text) {
  switch (k.kind) {
    case Kind::Bool: return text == "true";
    case Kind::String: return std::string(text);
    case Kind::Int: {
      int64_t n = 0;
      auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
      if (ec != std::errc() || end != text.data() + text.size() || text.empty())
        throw ConfigError(fmt::format("--{}: expected an integer, got '{}'", flag, text));
      return n;
    }
    case Kind::Float: {
      double x = 0;
      auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), x);
      if (ec != std::errc() || end != text.data() + text.size() || text.empty())
        throw ConfigError(fmt::format("--{}: expected a number, got '{}'", flag, text));
      return x;
    }
  }
  return false;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(fmt::format("{}: cannot read config file: {}", path, std::strerror(errno)));
  std::ostringstream out;
  out << in.rdbuf();
  if (in.bad()) throw ConfigError(fmt::format("{}: cannot read config file: {}", path, std::strerror(errno)));
  return out.str();
}

// Keys that are parsed and checked but whose feature is not built yet: any value
// but the default is refused, naming where it was set, so a deployment never runs
// believing it has them.
void refuse_unbuilt(const Config& cfg, const Origins& origins) {
  const Config d;
  // Sizing the KV cache by device memory is done on a GPU only.
  if (cfg.engine.device == "cpu" && cfg.engine.gpu_memory_utilization != d.engine.gpu_memory_utilization) {
    auto it = origins.find("engine.gpu_memory_utilization");
    throw ConfigError(fmt::format("{}: applies to --device cuda only: the CPU's KV cache is not sized by it; leave it "
                                  "at its default",
                                  it != origins.end() ? it->second : std::string("engine.gpu_memory_utilization")));
  }
}


std::string where_set(const Origins& origins, std::string_view key) {
  auto it = origins.find(key);
  return it != origins.end() ? it->second : std::string(key);
}

// One rank per inferd process: a group of N is N processes, node_rank 0 (the
// head, which serves the API) to N-1 (headless workers), on one host or many.
void check_parallel(const Config& cfg, const Origins& origins) {
  const int tp = cfg.engine.tensor_parallel_size;
  const ParallelConfig& p = cfg.parallel;
  if (p.nnodes != tp)
    throw ConfigError(fmt::format(
        "{}: nnodes ({}) must equal tensor_parallel_size ({}): each inferd process is one rank of the group",
        where_set(origins, origins.count("parallel.nnodes") ? "parallel.nnodes" : "engine.tensor_parallel_size"),
        p.nnodes, tp));
  if (p.headless != (p.node_rank > 0))
    throw ConfigError(fmt::format("{}: {}", where_set(origins, origins.count("parallel.headless") ? "parallel.headless" : "parallel.node_rank"),
                                  p.headless ? "a headless worker has node_rank 1 or more (rank 0 is the head)"
                                             : "node_rank " + std::to_string(p.node_rank) +
                                                   " is a worker rank: add --headless (only rank 0 serves the API)"));
  if (tp > 1 && !INFERD_HAVE_GLOO)
    throw ConfigError(fmt::format("{}: this build has no Gloo, which CPU ranks talk through and GPU ranks meet by: "
                                  "install libgloo-dev and reconfigure (meson setup --reconfigure)",
                                  where_set(origins, "engine.tensor_parallel_size")));
  // GPU ranks talk through NCCL, each on the device its own engine.device names.
  if (tp > 1 && cfg.engine.device != "cpu" && !INFERD_HAVE_NCCL)
    throw ConfigError(fmt::format("{}: tensor_parallel_size {} on {} needs NCCL, which this build has not: install "
                                  "NCCL and reconfigure with -Dnccl=enabled",
                                  where_set(origins, "engine.device"), tp, cfg.engine.device));
  if (tp > 1 && (p.master_port < 1 || p.master_port > 65534))
    throw ConfigError(fmt::format("{}: master_port must leave room for the rendezvous port after it (1-65534)",
                                  where_set(origins, "parallel.master_port")));
}

// Reads admin_api_key_file into admin_api_key. Its surrounding whitespace (the
// newline an editor adds) is not part of the key.
void read_admin_key(Config& cfg, const Origins& origins) {
  ServerConfig& s = cfg.server;
  if (s.admin_api_key_file.empty()) return;
  const std::string where = where_set(origins, "server.admin_api_key_file");
  if (!s.admin_api_key.empty())
    throw ConfigError(fmt::format("{}: set admin_api_key or admin_api_key_file, not both ({} is set too)", where,
                                  where_set(origins, "server.admin_api_key")));
  std::ifstream in(s.admin_api_key_file, std::ios::binary);
  if (!in) throw ConfigError(fmt::format("{}: cannot read {}: {}", where, s.admin_api_key_file, std::strerror(errno)));
  std::string key((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto first = key.find_first_not_of(" \t\r\n");
  key = first == std::string::npos ? std::string() : key.substr(first, key.find_last_not_of(" \t\r\n") - first + 1);
  if (std::string why = admin_key_problem(key); !why.empty())
    throw ConfigError(fmt::format("{}: the key in {} {}", where, s.admin_api_key_file, why));
  s.admin_api_key = std::move(key);
}

void check_across_keys(const Config& cfg, const Origins& origins) {
  if (!cfg.server.admin_api_key.empty() && cfg.server.admin_api_key == cfg.server.api_key) {
    const char* key = origins.count("server.admin_api_key_file") ? "server.admin_api_key_file" : "server.admin_api_key";
    throw ConfigError(fmt::format("{}: the admin key must differ from api_key, which every API client holds",
                                  where_set(origins, key)));
  }
  if (cfg.parallel.node_rank >= cfg.parallel.nnodes) {
    auto it = origins.find("parallel.node_rank");
    if (it == origins.end()) it = origins.find("parallel.nnodes");
    const std::string where = it != origins.end() ? it->second : "[parallel] node_rank";
    throw ConfigError(fmt::format("{}: node_rank must be less than nnodes ({}), got {}", where, cfg.parallel.nnodes,
                                  cfg.parallel.node_rank));
  }
  check_parallel(cfg, origins);
  refuse_unbuilt(cfg, origins);
  // A group's workers build each step's batch from the plan without its drafts.
  if (cfg.engine.speculative.num_speculative_tokens > 0 && cfg.engine.tensor_parallel_size > 1)
    throw ConfigError(fmt::format("{}: speculative decoding is not supported with tensor_parallel_size > 1 ({} is {})",
                                  where_set(origins, "engine.speculative_config"),
                                  where_set(origins, "engine.tensor_parallel_size"), cfg.engine.tensor_parallel_size));
}

}  // namespace

std::string default_model_path() {
  std::string cache;
  if (const char* c = std::getenv("INFERD_CACHE"); c != nullptr && *c != '\0') {
    cache = c;
  } else if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0') {
    cache = std::string(x) + "/inferd";
  } else {
    const char* home = std::getenv("HOME");
    cache = std::string(home != nullptr ? home : "") + "/.cache/inferd";
  }
  return cache + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

std::string Config::model_name() const {
  if (!server.served_model_name.empty()) return server.served_model_name;
  std::string_view name = model.path;
  while (name.size() > 1 && name.ends_with('/')) name.remove_suffix(1);  // a checkpoint directory
  if (auto slash = name.rfind('/'); slash != std::string_view::npos) name.remove_prefix(slash + 1);
  if (name.ends_with(".gguf")) name.remove_suffix(5);
  return std::string(name);
}

CommandLine parse_command_line(std::span<const std::string_view> args) {
  CommandLine cmd;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string_view arg = args[i];
    if (!arg.starts_with("--") || arg.size() == 2)
      throw ConfigError(fmt::format("unexpected argument '{}' (flags start with --; see --help)", arg));
    std::string_view name = arg.substr(2);
    std::optional<std::string_view> inline_value;
    if (auto eq = name.find('='); eq != std::string_view::npos) {
      inline_value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    auto takes_no_value = [&] {
      if (inline_value) throw ConfigError(fmt::format("--{}: takes no value", name));
    };
    auto value = [&]() -> std::string {
      if (inline_value) return std::string(*inline_value);
      if (i + 1 >= args.size() || args[i + 1].starts_with("--"))
        throw ConfigError(fmt::format("--{}: missing value", name));
      return std::string(args[++i]);
    };

    if (name == "help") {
      takes_no_value();
      cmd.help = true;
    } else if (name == "version") {
      takes_no_value();
      cmd.version = true;
    } else if (name == "config") {
      cmd.config_path = value();
      if (cmd.config_path.empty()) throw ConfigError("--config: missing value");
    } else if (const Key* k = find_flag(name)) {
      if (k->kind == Kind::Bool) {
        takes_no_value();
        cmd.overrides.emplace_back(name, "true");
      } else {
        cmd.overrides.emplace_back(name, value());
      }
    } else if (const Key* neg = name.starts_with("no-") ? find_flag(name.substr(3)) : nullptr;
               neg != nullptr && neg->kind == Kind::Bool) {
      takes_no_value();
      cmd.overrides.emplace_back(neg->flag, "false");
    } else {
      throw ConfigError(fmt::format("--{}: unknown flag (see --help)", name));
    }
  }
  return cmd;
}

Config parse_config_toml(std::string_view text, std::string_view source) {
  Config cfg;
  Origins origins;
  apply_toml(cfg, text, source, origins);
  read_admin_key(cfg, origins);
  check_across_keys(cfg, origins);
  return cfg;
}

Config load_config(const CommandLine& cmd) {
  Config cfg;
  Origins origins;
  if (!cmd.config_path.empty()) apply_toml(cfg, read_file(cmd.config_path), cmd.config_path, origins);
  for (const auto& [flag, text] : cmd.overrides) {
    const Key* k = find_flag(flag);
    if (k == nullptr) throw ConfigError(fmt::format("--{}: unknown flag (see --help)", flag));
    if (renamed_flag(flag)) cfg.deprecated.push_back(fmt::format("--{}: deprecated name; use --{}", flag, k->flag));
    apply(cfg, *k, from_flag(*k, flag, text), "--" + flag, origins);
  }
  read_admin_key(cfg, origins);
  check_across_keys(cfg, origins);
  return cfg;
}

std::vector<std::string> config_keys() {
  std::vector<std::string> out;
  for (const Key& k : keys()) out.push_back(std::string(k.section) + "." + std::string(k.name));
  return out;
}

std::string usage() {
  std::string out =
      "usage: inferd [--config FILE] [FLAG...]\n"
      "\n"
      "Serves an LLM through an OpenAI-compatible HTTP API. Flags override the\n"
      "file; both '--flag value' and '--flag=value' work. Every key, with or\n"
      "without a flag, is documented in etc/inferd.toml.\n"
      "\n"
      "  --config FILE                    TOML configuration file\n"
      "  --help                           print this help and exit\n"
      "  --version                        print the version and exit\n"
      "\n"
      "Admin routes (/admin/*) need the admin key (--admin-api-key-file) or are\n"
      "served only on the admin listener (--admin-port, --admin-socket).\n";
  out += faults::kBuiltIn ? "This build has fault points (INFERD_FAULTS, /admin/fault): a test build.\n"
                          : "This build has no fault points (configure with -Dfaults=true for tests).\n";
  out += "\n";
  for (const Key& k : keys()) {
    if (k.flag.empty()) continue;
    std::string left;
    switch (k.kind) {
      case Kind::Bool: left = fmt::format("--[no-]{}", k.flag); break;
      case Kind::Int: left = fmt::format("--{} N", k.flag); break;
      case Kind::Float: left = fmt::format("--{} X", k.flag); break;
      case Kind::String: left = fmt::format("--{} TEXT", k.flag); break;
    }
    out += fmt::format("  {:<32} {} ([{}] {})\n", left, k.help, k.section, k.name);
  }
  return out;
}

}  // namespace inferd::daemon
