// `inferctl bench serve`: a running daemon over HTTP, like `vllm bench serve`.
// For each concurrency level, that many clients send streamed /v1/completions
// requests back to back (fixed prompts, ignore_eos) until the level's requests
// are done. Per level: aggregate output tok/s, TTFT, per-stream decode tok/s.
// Token counts come from the usage chunk (stream_options.include_usage), never
// from counting chunks: one chunk may carry several tokens, or none.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <boost/json.hpp>

#include "tools/http_client.hpp"
#include "tools/inferctl_commands.hpp"

#ifndef INFERD_PLOT_SCRIPT
#define INFERD_PLOT_SCRIPT "tools/plot_bench_serve.py"
#endif

extern char** environ;

namespace inferd::tools {
namespace {

namespace json = boost::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kUsage =
    "usage: inferctl bench serve [--url http://127.0.0.1:8000] [--api-key KEY]\n"
    "         [--concurrency 1,2,4,8,16] [--requests-per-level N] [--input-len WORDS]\n"
    "         [--max-tokens 128] [--timeout SECONDS] [--ready-timeout SECONDS]\n"
    "         [--out FILE] [--plot FILE.png] [--plot-script PATH]\n"
    "Streams /v1/completions at each concurrency level and writes JSON (stdout\n"
    "unless --out): aggregate output tok/s, TTFT mean/p50/p99 and per-stream\n"
    "decode tok/s per level. --requests-per-level defaults to 2x the level, at\n"
    "least 4. --plot runs python3 on tools/plot_bench_serve.py (needs matplotlib).\n";

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

int positive_int(std::string_view flag, std::string_view text, int hi) {
  int n = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end != text.data() + text.size() || n < 1 || n > hi)
    throw std::invalid_argument("--" + std::string(flag) + ": expected an integer from 1 to " + std::to_string(hi) +
                                ", got '" + std::string(text) + "'");
  return n;
}

double positive_double(const Args& args, const std::string& flag, double def) {
  const double x = args.get_double(flag, def);
  if (!(x > 0)) throw std::invalid_argument("--" + flag + ": must be greater than 0");
  return x;
}

struct Options {
  Url url;
  std::string api_key;
  std::vector<int> concurrency;
  int requests_per_level = 0;  // 0: 2x the level, at least 4
  int input_len = 0;
  int max_tokens = 0;
  std::chrono::milliseconds timeout{};
  std::chrono::milliseconds ready_timeout{};
  std::string out, plot, plot_script;
};

Options parse_options(const Args& args) {
  args.allow_only({"url", "api-key", "concurrency", "requests-per-level", "input-len", "max-tokens", "timeout",
                   "ready-timeout", "out", "plot", "plot-script", "help"});
  if (args.positional.size() > 1)
    throw std::invalid_argument("unexpected argument '" + args.positional[1] + "' (see --help)");
  Options o;
  o.url = parse_url(args.get("url", "http://127.0.0.1:8000"));
  o.api_key = args.get("api-key", "");
  for (const auto& c : args.get_list("concurrency", {"1", "2", "4", "8", "16"}))
    o.concurrency.push_back(positive_int("concurrency", c, 1024));
  if (o.concurrency.empty()) throw std::invalid_argument("--concurrency: expected a list such as 1,2,4");
  if (args.has("requests-per-level"))
    o.requests_per_level = positive_int("requests-per-level", args.get("requests-per-level", ""), 1 << 20);
  o.input_len = positive_int("input-len", args.get("input-len", "128"), 1 << 20);
  o.max_tokens = positive_int("max-tokens", args.get("max-tokens", "128"), 1 << 20);
  o.timeout = std::chrono::milliseconds(std::lround(positive_double(args, "timeout", 300) * 1000));
  o.ready_timeout = std::chrono::milliseconds(std::lround(positive_double(args, "ready-timeout", 300) * 1000));
  o.out = args.get("out", "");
  o.plot = args.get("plot", "");
  o.plot_script = args.get("plot-script", INFERD_PLOT_SCRIPT);
  for (const char* f : {"out", "plot", "plot-script", "api-key"})
    if (args.has(f) && args.get(f, "") == "true") throw std::invalid_argument(std::string("--") + f + ": missing value");
  return o;
}

// About `words` words of plain English. The run's nonce and the request's id
// lead the prompt so that no two requests, in this run or an earlier one against
// the same daemon, share a prefix the daemon's prefix cache could reuse.
std::string make_prompt(int id, int words) {
  static const std::string nonce = std::to_string(std::random_device{}() % 100000);
  static const std::vector<std::string> kWords = [] {
    std::istringstream in(
        "The quick brown fox jumps over the lazy dog while the farmer walks slowly along the river "
        "towards the old mill, counting the clouds that drift above the quiet green hills.");
    std::vector<std::string> w;
    for (std::string s; in >> s;) w.push_back(s);
    return w;
  }();
  std::string p = "Request " + nonce + "-" + std::to_string(id) + ".";
  for (int i = 0; i < words; ++i) p += " " + kWords[i % kWords.size()];
  return p;
}

// Splits a server-sent event stream into the payloads of its `data:` lines.
class SseReader {
 public:
  template <class F>
  void feed(std::string_view bytes, F&& on_data) {
    pending_ += bytes;
    size_t nl;
    while ((nl = pending_.find('\n')) != std::string::npos) {
      std::string_view line(pending_.data(), nl);
      if (line.ends_with('\r')) line.remove_suffix(1);
      if (line.starts_with("data:")) {
        line.remove_prefix(5);
        if (line.starts_with(' ')) line.remove_prefix(1);
        on_data(line);
      }
      pending_.erase(0, nl + 1);
    }
  }

 private:
  std::string pending_;
};

struct RequestResult {
  bool ok = false;
  std::string error;
  double ttft_s = 0;
  double e2e_s = 0;
  int prompt_tokens = 0;
  int completion_tokens = 0;
  std::optional<double> decode_tps;  // needs two tokens and a measurable time between them
};

std::string error_message(const json::value& v) {
  if (const auto* o = v.if_object())
    if (const auto* e = o->if_contains("error"); e && e->is_object())
      if (const auto* m = e->as_object().if_contains("message"); m && m->is_string()) return std::string(m->as_string());
  return json::serialize(v);
}

RequestResult run_request(const Options& o, const std::string& model, int id, int max_tokens) {
  const std::string body = json::serialize(json::object{{"model", model},
                                                        {"prompt", make_prompt(id, o.input_len)},
                                                        {"max_tokens", max_tokens},
                                                        {"temperature", 0.0},
                                                        {"ignore_eos", true},
                                                        {"stream", true},
                                                        {"stream_options", {{"include_usage", true}}}});
  RequestResult r;
  SseReader sse;
  std::string raw;  // the start of the body, to explain a non-200 answer
  std::optional<Clock::time_point> first;
  bool usage_seen = false, done = false;
  const auto start = Clock::now();
  auto on_event = [&](std::string_view data) {
    if (data == "[DONE]") {
      done = true;
      return;
    }
    json::error_code ec;
    const json::value v = json::parse(data, ec);
    if (ec || !v.is_object()) {
      if (r.error.empty()) r.error = "bad SSE data: " + std::string(data.substr(0, 200));
      return;
    }
    const auto& obj = v.as_object();
    if (obj.contains("error")) {
      if (r.error.empty()) r.error = error_message(v);
      return;
    }
    if (const auto* ch = obj.if_contains("choices"); ch && ch->is_array() && !first)
      for (const auto& c : ch->as_array())
        if (const auto* t = c.is_object() ? c.as_object().if_contains("text") : nullptr;
            t && t->is_string() && !t->as_string().empty())
          first = Clock::now();
    if (const auto* u = obj.if_contains("usage"); u && u->is_object()) {
      const auto& uo = u->as_object();
      if (const auto* n = uo.if_contains("completion_tokens"); n && n->is_int64()) {
        r.completion_tokens = static_cast<int>(n->as_int64());
        usage_seen = true;
      }
      if (const auto* n = uo.if_contains("prompt_tokens"); n && n->is_int64())
        r.prompt_tokens = static_cast<int>(n->as_int64());
    }
  };
  try {
    const HttpReply reply = http_request_streamed(
        o.url, "POST", "/v1/completions", body,
        [&](std::string_view bytes) {
          if (raw.size() < 2048) raw.append(bytes.substr(0, 2048 - raw.size()));
          sse.feed(bytes, on_event);
        },
        o.timeout, o.api_key);
    const auto end = Clock::now();
    r.e2e_s = seconds(end - start);
    if (reply.status != 200) {
      json::error_code ec;
      const json::value v = json::parse(raw, ec);
      r.error = "HTTP " + std::to_string(reply.status) + ": " + (ec ? raw.substr(0, 200) : error_message(v));
      return r;
    }
    if (r.error.empty() && !done) r.error = "the stream ended without [DONE]";
    if (r.error.empty() && !usage_seen) r.error = "the stream carried no usage (stream_options.include_usage)";
    if (r.error.empty() && !first) r.error = "the stream carried no text";
    if (!r.error.empty()) return r;
    r.ttft_s = seconds(*first - start);
    if (const double decode = seconds(end - *first); r.completion_tokens > 1 && decode > 0)
      r.decode_tps = (r.completion_tokens - 1) / decode;
    r.ok = true;
  } catch (const std::exception& e) {
    r.e2e_s = seconds(Clock::now() - start);
    r.error = e.what();
  }
  return r;
}

// Linear interpolation between the nearest ranks, as numpy's default.
double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const double pos = p / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

json::value stat(const std::vector<double>& v) {
  if (v.empty()) return nullptr;
  return json::object{{"mean", mean(v)}, {"p50", percentile(v, 50)}, {"p99", percentile(v, 99)}};
}

// `concurrency` clients, each sending its next request as soon as its last one ends.
json::object run_level(const Options& o, const std::string& model, int concurrency, int n_requests, int& next_id) {
  std::vector<RequestResult> results(n_requests);
  std::atomic<int> next{0};
  const int first_id = next_id;
  next_id += n_requests;
  const auto start = Clock::now();
  std::vector<std::thread> clients;
  for (int c = 0; c < std::min(concurrency, n_requests); ++c)
    clients.emplace_back([&] {
      for (int i; (i = next.fetch_add(1)) < n_requests;) results[i] = run_request(o, model, first_id + i, o.max_tokens);
    });
  for (auto& t : clients) t.join();
  const double wall = seconds(Clock::now() - start);

  std::vector<double> ttft, tps, e2e, prompt;
  int64_t output_tokens = 0;
  int failed = 0;
  json::array errors;  // the first few, so a failing level explains itself
  for (const auto& r : results) {
    if (!r.ok) {
      ++failed;
      if (errors.size() < 5) errors.push_back(json::string(r.error));
      continue;
    }
    output_tokens += r.completion_tokens;
    ttft.push_back(r.ttft_s);
    e2e.push_back(r.e2e_s);
    prompt.push_back(r.prompt_tokens);
    if (r.decode_tps) tps.push_back(*r.decode_tps);
  }
  json::object level{{"concurrency", concurrency},
                     {"requests", n_requests},
                     {"ok", n_requests - failed},
                     {"failed", failed},
                     {"wall_s", wall},
                     {"output_tokens", output_tokens},
                     {"output_tokens_per_s", static_cast<double>(output_tokens) / wall},
                     {"prompt_tokens_mean", prompt.empty() ? json::value(nullptr) : json::value(mean(prompt))},
                     {"ttft_s", stat(ttft)},
                     {"per_stream_tokens_per_s_mean", tps.empty() ? json::value(nullptr) : json::value(mean(tps))},
                     {"e2e_s", stat(e2e)}};
  if (!errors.empty()) level["errors"] = errors;
  std::fprintf(stderr, "concurrency %3d: %d/%d ok, %.1f output tok/s, TTFT p50 %.3f s, %.1f tok/s per stream\n",
               concurrency, n_requests - failed, n_requests, static_cast<double>(output_tokens) / wall,
               ttft.empty() ? 0.0 : percentile(ttft, 50), tps.empty() ? 0.0 : mean(tps));
  return level;
}

std::string first_line_with(const std::string& path, std::string_view key, std::string_view sep) {
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (!line.starts_with(key)) continue;
    const size_t s = line.find(sep);
    if (s == std::string::npos) continue;
    std::string v = line.substr(s + sep.size());
    v.erase(0, v.find_first_not_of(" \t\""));
    while (!v.empty() && (v.back() == '"' || v.back() == ' ')) v.pop_back();
    return v;
  }
  return "unknown";
}

// Where the numbers come from: the client shares the machine with the daemon
// when the URL is local, so its cores are the daemon's.
json::object machine() {
  return {{"cpu", first_line_with("/proc/cpuinfo", "model name", ":")},
          {"cores", std::thread::hardware_concurrency()},
          {"memory", first_line_with("/proc/meminfo", "MemTotal", ":")},
          {"os", first_line_with("/etc/os-release", "PRETTY_NAME", "=")}};
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// /health/ready answers 200 once the daemon serves (after any warm-up).
void wait_ready(const Options& o) {
  const auto deadline = Clock::now() + o.ready_timeout;
  std::string last;
  for (;;) {
    try {
      const HttpReply r = http_request(o.url, "GET", "/health/ready", {}, std::chrono::seconds(5));
      if (r.status == 200) return;
      last = "/health/ready answered " + std::to_string(r.status);
    } catch (const std::runtime_error& e) {
      last = e.what();
    }
    if (Clock::now() >= deadline)
      throw std::runtime_error("the daemon was not ready within " + std::to_string(o.ready_timeout.count() / 1000) +
                               " s: " + last);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

json::object served_model(const Options& o) {
  const HttpReply r = http_request(o.url, "GET", "/v1/models", {}, std::chrono::seconds(10), o.api_key);
  if (r.status == 401) throw std::runtime_error("/v1/models answered 401: pass the daemon's key with --api-key");
  json::error_code ec;
  const json::value v = json::parse(r.body, ec);
  if (r.status != 200 || ec || !v.is_object())
    throw std::runtime_error("/v1/models answered " + std::to_string(r.status) + ": " + r.body.substr(0, 200));
  const auto* data = v.as_object().if_contains("data");
  if (!data || !data->is_array() || data->as_array().empty() || !data->as_array().front().is_object())
    throw std::runtime_error("/v1/models lists no model");
  return data->as_array().front().as_object();
}

int run_plot(const std::string& script, const std::string& json_path, const std::string& png) {
  std::vector<std::string> argv_s = {"python3", script, json_path, png};
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (int err = posix_spawnp(&pid, "python3", nullptr, nullptr, argv.data(), environ); err != 0) {
    std::cerr << "inferctl bench serve: cannot run python3: " << std::strerror(err) << "\n";
    return 1;
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::cerr << "inferctl bench serve: " << script << " failed; the JSON is in " << json_path << "\n";
    return 1;
  }
  std::cerr << "plot: " << png << "\n";
  return 0;
}

}  // namespace

int cmd_bench_serve(const Args& args) {
  if (args.has("help")) {
    std::cout << kUsage;
    return 0;
  }
  const Options o = parse_options(args);
  wait_ready(o);
  const json::object model = served_model(o);
  const std::string model_id = model.contains("id") && model.at("id").is_string() ? std::string(model.at("id").as_string()) : "";

  // One short request first: it fails fast on a misconfigured daemon and keeps
  // one-time costs (first allocations, page faults) out of the first level.
  int next_id = 0;
  if (const RequestResult warm = run_request(o, model_id, next_id++, std::min(o.max_tokens, 8)); !warm.ok) {
    std::cerr << "inferctl bench serve: the warm-up request failed: " << warm.error << "\n";
    return 1;
  }

  json::array levels;
  int ok = 0;
  for (int c : o.concurrency) {
    const int n = o.requests_per_level > 0 ? o.requests_per_level : std::max(4, 2 * c);
    levels.push_back(run_level(o, model_id, c, n, next_id));
    ok += static_cast<int>(levels.back().as_object().at("ok").as_int64());
  }

  json::object model_info{{"id", model_id}};
  if (const auto* m = model.if_contains("max_model_len")) model_info["max_model_len"] = *m;
  if (const auto* r = model.if_contains("root")) model_info["root"] = *r;
  const json::object out{
      {"benchmark", "inferctl bench serve"},
      {"date", utc_now()},
      {"url", o.url.text()},
      {"machine", machine()},
      {"model", model_info},
      {"params",
       {{"endpoint", "/v1/completions"},
        {"input_len_words", o.input_len},
        {"max_tokens", o.max_tokens},
        {"ignore_eos", true},
        {"temperature", 0.0},
        {"requests_per_level", o.requests_per_level > 0 ? json::value(o.requests_per_level)
                                                        : json::value("2x concurrency, at least 4")}}},
      {"levels", levels}};
  const std::string text = json::serialize(out) + "\n";

  std::string json_path = o.out;
  if (!o.out.empty()) {
    std::ofstream f(o.out);
    if (!(f << text)) throw std::runtime_error("cannot write " + o.out);
  } else {
    std::cout << text << std::flush;
  }
  int rc = ok > 0 ? 0 : 1;  // every request failing is a broken run, not a measurement
  if (!o.plot.empty()) {
    if (json_path.empty()) {  // the plot script reads a file
      char tmpl[] = "/tmp/inferctl-bench-serve-XXXXXX.json";
      const int fd = mkstemps(tmpl, 5);
      if (fd < 0) throw std::runtime_error("cannot create a temporary file for the plot");
      close(fd);
      json_path = tmpl;
      std::ofstream(json_path) << text;
    }
    if (run_plot(o.plot_script, json_path, o.plot) != 0) rc = 1;
    if (o.out.empty() && rc == 0) std::remove(json_path.c_str());
  }
  return rc;
}

}  // namespace inferd::tools
