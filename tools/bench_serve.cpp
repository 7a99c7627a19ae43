// `inferctl bench serve`: a running daemon over HTTP, like `vllm bench serve`.
// For each concurrency level, that many clients send streamed /v1/completions
// requests back to back (fixed prompts, ignore_eos) until the level's requests
// are done. Per level: aggregate output tok/s, TTFT, per-stream decode tok/s.
// Token counts come from the usage chunk (stream_options.include_usage), never
// from counting chunks: one chunk may carry several tokens, or none.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <boost/json.hpp>

#include "tools/bench_http.hpp"
#include "tools/http_client.hpp"
#include "tools/inferctl_commands.hpp"

#ifndef INFERD_PLOT_SCRIPT
#define INFERD_PLOT_SCRIPT "tools/plot_bench_serve.py"
#endif

namespace inferd::tools {
namespace {

namespace json = boost::json;
using Clock = BenchClock;

constexpr const char* kUsage =
    "usage: inferctl bench serve [--url http://127.0.0.1:8000] [--api-key KEY]\n"
    "         [--concurrency 1,2,4,8,16] [--requests-per-level N] [--input-len WORDS]\n"
    "         [--max-tokens 128] [--timeout SECONDS] [--ready-timeout SECONDS]\n"
    "         [--out FILE] [--plot FILE.png] [--plot-script PATH]\n"
    "Streams /v1/completions at each concurrency level and writes JSON (stdout\n"
    "unless --out): aggregate output tok/s, TTFT mean/p50/p99 and per-stream\n"
    "decode tok/s per level. --requests-per-level defaults to 2x the level, at\n"
    "least 4. --plot runs python3 on tools/plot_bench_serve.py (needs matplotlib).\n";

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

using RequestResult = StreamResult;

RequestResult run_request(const Options& o, const std::string& model, int id, int max_tokens) {
  return run_streamed(o.url, "/v1/completions",
                      json::object{{"model", model},
                                   {"prompt", make_prompt(id, o.input_len)},
                                   {"max_tokens", max_tokens},
                                   {"temperature", 0.0},
                                   {"ignore_eos", true},
                                   {"stream", true},
                                   {"stream_options", {{"include_usage", true}}}},
                      o.timeout, o.api_key);
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

}  // namespace

int cmd_bench_serve(const Args& args) {
  if (args.has("help")) {
    std::cout << kUsage;
    return 0;
  }
  const Options o = parse_options(args);
  wait_ready(o.url, o.ready_timeout);
  const json::object model = served_model(o.url, o.api_key);
  const std::string model_id = tools::model_id(model);

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

  const json::object out{
      {"benchmark", "inferctl bench serve"},
      {"date", utc_now()},
      {"url", o.url.text()},
      {"machine", machine()},
      {"model", model_summary(model)},
      {"params",
       {{"endpoint", "/v1/completions"},
        {"input_len_words", o.input_len},
        {"max_tokens", o.max_tokens},
        {"ignore_eos", true},
        {"temperature", 0.0},
        {"requests_per_level", o.requests_per_level > 0 ? json::value(o.requests_per_level)
                                                        : json::value("2x concurrency, at least 4")}}},
      {"levels", levels}};
  // Every request failing is a broken run, not a measurement.
  const int rc = write_and_plot("inferctl bench serve", out, o.out, o.plot, o.plot_script);
  return ok > 0 ? rc : 1;
}

}  // namespace inferd::tools
