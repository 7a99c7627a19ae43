// `inferctl bench single`: warm single-request qualification of a running
// daemon. Three workloads of different predictability, each repeated a few
// times, one request at a time, streamed through /v1/chat/completions:
//   count        count from 1 to 300, an exact answer the output is checked against;
//   dataclasses  twenty Python dataclasses: structured, repetitive code;
//   prose        low-predictability technical prose.
// Per trial: TTFT to the first non-empty delta, decode tok/s from the usage
// chunk's completion tokens over the time after that delta, and the speculative
// acceptance rate from the /metrics counters before and after the trial.
// Medians per workload.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "tools/bench_http.hpp"
#include "tools/http_client.hpp"
#include "tools/inferctl_commands.hpp"

#ifndef INFERD_PLOT_SINGLE_SCRIPT
#define INFERD_PLOT_SINGLE_SCRIPT "tools/plot_bench_single.py"
#endif

namespace inferd::tools {
namespace {

namespace json = boost::json;

constexpr const char* kUsage =
    "usage: inferctl bench single [--url http://127.0.0.1:8000] [--api-key KEY]\n"
    "         [--workloads count,dataclasses,prose] [--trials 3] [--max-tokens N]\n"
    "         [--timeout SECONDS] [--ready-timeout SECONDS] [--nonce TAG]\n"
    "         [--out FILE] [--plot FILE.png] [--plot-script PATH]\n"
    "One streamed /v1/chat/completions request at a time (temperature 0), --trials\n"
    "times per workload, after one untimed request. Writes JSON (stdout unless --out):\n"
    "per trial TTFT (to the first non-empty delta), decode tok/s (usage's completion\n"
    "tokens after the first, over the time after it) and speculative decoding's figures\n"
    "from /metrics deltas: acceptance (accepted over drafted tokens), mean acceptance\n"
    "length (1 + accepted tokens per draft) and acceptance per draft position (null or\n"
    "empty when nothing was drafted); per workload the medians and the totals' figures.\n"
    "  count        count from 1 to 300 (1,200 tokens); each output is checked\n"
    "               against the exact answer\n"
    "  dataclasses  twenty Python dataclasses (1,024 tokens)\n"
    "  prose        low-predictability technical prose (512 tokens)\n"
    "--max-tokens replaces each workload's budget; every budget is capped to leave\n"
    "the prompt room within the model's max_model_len. Each message starts with\n"
    "the run's tag (random unless --nonce) and the trial's number, so no trial hits\n"
    "the prefix cache; two runs given the same --nonce send the same prompts (to\n"
    "compare two daemons on the same outputs). --plot runs python3 on\n"
    "tools/plot_bench_single.py (needs matplotlib).\n";

struct Workload {
  std::string name;
  std::string prompt;
  int max_tokens = 0;
  std::string exact;  // the whole expected answer, or empty
};

std::string count_to(int n) {
  std::string s;
  for (int i = 1; i <= n; ++i) s += std::to_string(i) + (i < n ? "\n" : "");
  return s;
}

const std::vector<Workload>& workloads() {
  static const std::vector<Workload> all = {
      {"count", "Count from 1 to 300. Write each number on its own line and nothing else.", 1200, count_to(300)},
      {"dataclasses",
       "Write twenty Python dataclasses for the domain model of an online bookshop (books, authors, "
       "publishers, customers, orders, payments, shipments and so on), with type hints and default values. "
       "Output only the code.",
       1024, ""},
      {"prose",
       "Write an essay in dense technical prose on the failure modes of distributed consensus protocols "
       "under asymmetric network partitions, clock drift and disk stalls. Use precise, unusual vocabulary; "
       "no lists, no headings, no code.",
       512, ""},
  };
  return all;
}

struct Options {
  Url url;
  std::string api_key;
  std::vector<Workload> workloads;
  int trials = 0;
  int max_tokens = 0;  // 0: each workload's own
  std::chrono::milliseconds timeout{};
  std::chrono::milliseconds ready_timeout{};
  std::string out, plot, plot_script;
  std::string nonce;  // leads every message, with the trial's number
};

Options parse_options(const Args& args) {
  args.allow_only({"url", "api-key", "workloads", "trials", "max-tokens", "timeout", "ready-timeout", "out", "plot",
                   "plot-script", "nonce", "help"});
  if (args.positional.size() > 1)
    throw std::invalid_argument("unexpected argument '" + args.positional[1] + "' (see --help)");
  Options o;
  o.url = parse_url(args.get("url", "http://127.0.0.1:8000"));
  o.api_key = args.get("api-key", "");
  for (const auto& name : args.get_list("workloads", {"count", "dataclasses", "prose"})) {
    const auto& all = workloads();
    const auto it = std::find_if(all.begin(), all.end(), [&](const Workload& w) { return w.name == name; });
    if (it == all.end())
      throw std::invalid_argument("--workloads: unknown workload '" + name + "' (count, dataclasses, prose)");
    o.workloads.push_back(*it);
  }
  if (o.workloads.empty()) throw std::invalid_argument("--workloads: expected a list such as count,prose");
  o.trials = positive_int("trials", args.get("trials", "3"), 1000);
  if (args.has("max-tokens")) o.max_tokens = positive_int("max-tokens", args.get("max-tokens", ""), 1 << 20);
  o.timeout = std::chrono::milliseconds(std::lround(positive_double(args, "timeout", 600) * 1000));
  o.ready_timeout = std::chrono::milliseconds(std::lround(positive_double(args, "ready-timeout", 300) * 1000));
  o.out = args.get("out", "");
  o.plot = args.get("plot", "");
  o.plot_script = args.get("plot-script", INFERD_PLOT_SINGLE_SCRIPT);
  o.nonce = args.get("nonce", std::to_string(std::random_device{}() % 100000));
  for (const char* f : {"out", "plot", "plot-script", "api-key", "workloads", "nonce"})
    if (args.has(f) && args.get(f, "") == "true") throw std::invalid_argument(std::string("--") + f + ": missing value");
  return o;
}

// The run's nonce and the trial lead the message, so that no trial reuses an
// earlier one's prompt from the daemon's prefix cache: every TTFT includes the
// whole prefill of the user's message.
std::string tagged(const Options& o, const std::string& prompt, int trial) {
  return "[" + o.nonce + "-" + std::to_string(trial) + "] " + prompt;
}

json::object chat_body(const std::string& model, const std::string& content, int max_tokens) {
  return json::object{{"model", model},
                      {"messages", json::array{json::object{{"role", "user"}, {"content", content}}}},
                      {"max_tokens", max_tokens},
                      {"temperature", 0.0},
                      {"stream", true},
                      {"stream_options", {{"include_usage", true}}}};
}

// The daemon's speculative-decoding counters (vLLM's names); `per_position[i]`:
// drafts whose token i was accepted.
struct SpecCounters {
  double drafts = 0, drafted = 0, accepted = 0;
  std::vector<double> per_position;

  SpecCounters operator-(const SpecCounters& o) const {
    SpecCounters d{drafts - o.drafts, drafted - o.drafted, accepted - o.accepted, per_position};
    for (size_t i = 0; i < d.per_position.size() && i < o.per_position.size(); ++i) d.per_position[i] -= o.per_position[i];
    return d;
  }
  SpecCounters& operator+=(const SpecCounters& o) {
    drafts += o.drafts, drafted += o.drafted, accepted += o.accepted;
    per_position.resize(std::max(per_position.size(), o.per_position.size()));
    for (size_t i = 0; i < o.per_position.size(); ++i) per_position[i] += o.per_position[i];
    return *this;
  }
  // As the seed and vLLM compute them from counter deltas: accepted over drafted
  // tokens; tokens a verify step yields, 1 + accepted / drafts; and per draft
  // position, the share of drafts whose token there was accepted.
  void report(json::object& out) const {
    out["drafts"] = drafts;
    out["draft_tokens"] = drafted;
    out["accepted_tokens"] = accepted;
    out["acceptance"] = drafted > 0 ? json::value(accepted / drafted) : json::value(nullptr);
    out["mean_acceptance_length"] = drafts > 0 ? json::value(1 + accepted / drafts) : json::value(nullptr);
    json::array pos;
    if (drafts > 0)
      for (double a : per_position) pos.push_back(a / drafts);
    out["acceptance_per_position"] = pos;
  }
};

SpecCounters spec_counters(const Url& url) {
  const std::string m = metrics_text(url);
  SpecCounters c{metric_sum(m, "vllm:spec_decode_num_drafts_total").value_or(0),
                 metric_sum(m, "vllm:spec_decode_num_draft_tokens_total").value_or(0),
                 metric_sum(m, "vllm:spec_decode_num_accepted_tokens_total").value_or(0),
                 {}};
  for (const auto& [position, n] : metric_by_label(m, "vllm:spec_decode_num_accepted_tokens_per_pos_total", "position")) {
    const size_t i = std::strtoul(position.c_str(), nullptr, 10);
    if (i < 64) {  // the most drafts a step takes is far below
      c.per_position.resize(std::max(c.per_position.size(), i + 1));
      c.per_position[i] += n;
    }
  }
  return c;
}

std::string trimmed(const std::string& s) {
  const size_t a = s.find_first_not_of(" \n\r\t");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \n\r\t") - a + 1);
}

// A fingerprint of a trial's text, so runs with and without speculation (same
// nonce, greedy) can be seen to give the same output; FNV-1a 64: a comparison
// between runs, not a security hash.
std::string fingerprint(const std::string& text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ull;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

json::object run_workload(const Options& o, const std::string& model, const Workload& w, int budget, int& trial_id) {
  json::array trials, errors;
  std::vector<double> ttft, tps;
  SpecCounters total;
  int ok = 0, exact = 0;
  for (int t = 0; t < o.trials; ++t) {
    const SpecCounters before = spec_counters(o.url);
    const StreamResult r =
        run_streamed(o.url, "/v1/chat/completions", chat_body(model, tagged(o, w.prompt, trial_id++), budget), o.timeout,
                     o.api_key);
    const SpecCounters after = spec_counters(o.url);
    if (!r.ok) {
      if (errors.size() < 5) errors.push_back(json::string(r.error));
      continue;
    }
    ++ok;
    const SpecCounters d = after - before;
    total += d;
    json::object trial{{"ttft_s", r.ttft_s},
                       {"decode_tokens_per_s", r.decode_tps ? json::value(*r.decode_tps) : json::value(nullptr)},
                       {"prompt_tokens", r.prompt_tokens},
                       {"completion_tokens", r.completion_tokens},
                       {"finish_reason", r.finish_reason},
                       {"e2e_s", r.e2e_s},
                       {"output_fnv1a64", fingerprint(r.text)}};
    d.report(trial);
    if (!w.exact.empty()) {
      const bool match = trimmed(r.text) == w.exact;
      exact += match;
      trial["exact"] = match;
    }
    trials.push_back(std::move(trial));
    ttft.push_back(r.ttft_s);
    if (r.decode_tps) tps.push_back(*r.decode_tps);
  }
  json::object out{{"workload", w.name},
                   {"max_tokens", budget},
                   {"trials", trials},
                   {"ok", ok},
                   {"failed", o.trials - ok},
                   {"median_ttft_s", ttft.empty() ? json::value(nullptr) : json::value(percentile(ttft, 50))},
                   {"median_decode_tokens_per_s", tps.empty() ? json::value(nullptr) : json::value(percentile(tps, 50))}};
  total.report(out);
  if (!w.exact.empty()) out["exact_outputs"] = exact;
  if (!errors.empty()) out["errors"] = errors;
  const std::string spec = total.drafts > 0 ? std::to_string(std::lround(100 * total.accepted / total.drafted)) +
                                                  "%, mean acceptance length " +
                                                  std::to_string(1 + total.accepted / total.drafts).substr(0, 4)
                                            : "none drafted";
  std::fprintf(stderr, "%-12s %d/%d ok, median decode %.2f tok/s, median TTFT %.3f s, acceptance %s\n",
               w.name.c_str(), ok, o.trials, tps.empty() ? 0.0 : percentile(tps, 50),
               ttft.empty() ? 0.0 : percentile(ttft, 50), spec.c_str());
  return out;
}

}  // namespace

int cmd_bench_single(const Args& args) {
  if (args.has("help")) {
    std::cout << kUsage;
    return 0;
  }
  const Options o = parse_options(args);
  wait_ready(o.url, o.ready_timeout);
  const json::object model = served_model(o.url, o.api_key);
  const std::string model_id = tools::model_id(model);
  // Room for the chat template and the longest prompt (under 100 tokens).
  const int cap = max_model_len(model) > 0 ? max_model_len(model) - 128 : 1 << 20;
  if (cap < 1) throw std::runtime_error("the model's max_model_len leaves no room for the workloads' prompts");

  // One short untimed request: fails fast on a misconfigured daemon and keeps
  // one-time costs out of the first trial.
  int trial_id = 0;
  if (const StreamResult warm = run_streamed(o.url, "/v1/chat/completions",
                                             chat_body(model_id, tagged(o, "Say hello.", trial_id++), 8), o.timeout,
                                             o.api_key);
      !warm.ok) {
    std::cerr << "inferctl bench single: the first request failed: " << warm.error << "\n";
    return 1;
  }

  json::array results;
  int ok = 0;
  for (const Workload& w : o.workloads) {
    results.push_back(run_workload(o, model_id, w, std::min(o.max_tokens > 0 ? o.max_tokens : w.max_tokens, cap),
                                   trial_id));
    ok += static_cast<int>(results.back().as_object().at("ok").as_int64());
  }

  const json::object out{{"benchmark", "inferctl bench single"},
                         {"date", utc_now()},
                         {"url", o.url.text()},
                         {"nonce", o.nonce},
                         {"machine", machine()},
                         {"model", model_summary(model)},
                         {"params",
                          {{"endpoint", "/v1/chat/completions"},
                           {"trials", o.trials},
                           {"temperature", 0.0},
                           {"ttft", "to the first non-empty delta"},
                           {"decode", "(completion_tokens - 1) / (end - first delta)"}}},
                         {"workloads", results}};
  // Every request failing is a broken run, not a measurement.
  const int rc = write_and_plot("inferctl bench single", out, o.out, o.plot, o.plot_script);
  return ok > 0 ? rc : 1;
}

}  // namespace inferd::tools
