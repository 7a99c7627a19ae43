// What the HTTP benchmarks (`inferctl bench serve`, `inferctl bench single`)
// share: one streamed request timed from the client's side, statistics, the
// daemon's readiness and model, the machine, /metrics counters and the plot.
#pragma once
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json.hpp>

#include "tools/http_client.hpp"
#include "tools/inferctl_commands.hpp"

namespace inferd::tools {

using BenchClock = std::chrono::steady_clock;

double seconds(BenchClock::duration d);

// Flag values: throw std::invalid_argument naming the flag.
int positive_int(std::string_view flag, std::string_view text, int hi);
double positive_double(const Args& args, const std::string& flag, double def);

// One streamed request (stream_options.include_usage) as the client saw it.
// Token counts come from the usage chunk, never from counting chunks: one
// chunk may carry several tokens, or none.
struct StreamResult {
  bool ok = false;
  std::string error;
  double ttft_s = 0;  // to the first chunk with non-empty text
  double e2e_s = 0;
  int prompt_tokens = 0;
  int completion_tokens = 0;
  std::optional<double> decode_tps;  // needs two tokens and a measurable time between them
  std::string text;                  // everything the stream said, in order
  std::string finish_reason;
};

// POSTs `body` (which must ask for a stream with usage) to `path`. Text is a
// completion's `text` or a chat delta's `content` or `reasoning_content`.
StreamResult run_streamed(const Url& url, const std::string& path, const boost::json::object& body,
                          std::chrono::milliseconds timeout, const std::string& api_key);

// Linear interpolation between the nearest ranks, as numpy's default.
double percentile(std::vector<double> v, double p);
double mean(const std::vector<double>& v);
// {"mean", "p50", "p99"}, or null for no values.
boost::json::value stat(const std::vector<double>& v);

// Where the numbers come from: the client shares the machine with the daemon
// when the URL is local, so its cores are the daemon's.
boost::json::object machine();
std::string utc_now();

// Waits for /health/ready to answer 200 (the daemon serves, after any warm-up).
void wait_ready(const Url& url, std::chrono::milliseconds timeout);
// The first model /v1/models lists, and what the benchmarks read of it.
boost::json::object served_model(const Url& url, const std::string& api_key);
std::string model_id(const boost::json::object& model);  // "" when absent
int max_model_len(const boost::json::object& model);     // 0 when absent
// id, max_model_len and root, for a benchmark's JSON.
boost::json::object model_summary(const boost::json::object& model);
// The daemon's /metrics, once, for as many metric_sum calls as need it.
std::string metrics_text(const Url& url);
// The sum over all label sets of one series (or one sample, when `name` carries
// its labels) in a /metrics text; nullopt when absent.
std::optional<double> metric_sum(const std::string& metrics, const std::string& name);
// One series' values by the value of one of its labels, summed over the other
// labels: {"0": 7, "1": 3} for name{...,position="0"} 7 and name{...,position="1"} 3.
std::map<std::string, double> metric_by_label(const std::string& metrics, const std::string& name,
                                              const std::string& label);

// Runs argv[0] (found on PATH) with its arguments and waits: its exit status, -1
// when a signal ended it. Throws std::runtime_error when it cannot be started.
int run_and_wait(std::vector<std::string> argv);

// Writes `doc` to `out` (stdout when empty) and, with a `png`, runs
// `python3 script JSON PNG`. Returns 0, or 1 when writing or plotting failed.
int write_and_plot(const std::string& who, const boost::json::object& doc, const std::string& out,
                   const std::string& png, const std::string& script);

}  // namespace inferd::tools
