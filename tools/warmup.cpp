// `inferctl warmup --plan [inferd options]`: the warm-up plan and shape-key
// coverage for a configuration, computed offline from the model (nothing runs).
// `inferctl warmup [--url URL]`: re-runs the full warm-up on a running daemon
// (its endpoint closes meanwhile) and waits for it to reopen.
#include <chrono>
#include <iostream>
#include <string_view>
#include <thread>
#include <vector>

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>

#include "daemon/config.hpp"
#include "daemon/engine_host.hpp"
#include "engine/engine.hpp"
#include "tools/http_client.hpp"
#include "tools/inferctl_commands.hpp"
#include "warmup/plan.hpp"

namespace inferd::tools {

namespace {

constexpr const char* kUsage =
    "usage: inferctl warmup --plan [--keys] [inferd options: --config FILE, --max-model-len N, ...]\n"
    "       inferctl warmup [--url http://127.0.0.1:8000] [--admin-api-key KEY] [--timeout SECONDS]\n"
    "--plan prints the four phases, the shape axes and how many reachable shape keys the plan\n"
    "covers, without running it (exit 1 when the plan cannot be sure to reach a bucket).\n"
    "Without --plan, closes the daemon's endpoint, re-runs the full warm-up and waits until\n"
    "it serves again (exit 1 when it did not). It uses /admin/warmup: --url is the daemon's admin\n"
    "listener (127.0.0.1:admin_port), or --admin-api-key carries the daemon's admin key.\n";

std::string join(const std::vector<int64_t>& v) {
  std::string s;
  for (int64_t x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

int show_plan(const Args& args) {
  std::vector<std::string_view> rest;
  for (const auto& a : args.raw)
    if (a != "--plan" && a != "--keys") rest.push_back(a);
  const daemon::Config cfg = daemon::load_config(daemon::parse_command_line(rest));
  engine::EngineOptions opts = daemon::engine_options(cfg);
  opts.threads = 1;
  opts.kv_cache_bytes = 0;  // the smallest cache that holds one sequence: nothing runs
  opts.gpu_memory_utilization = 0;  // the same on a GPU
  engine::Engine eng(opts);
  const auto axes = eng.shape_axes();
  const warmup::PlanLimits limits{eng.max_model_len(), opts.max_num_seqs, opts.max_num_batched_tokens};
  const warmup::Depth depth = warmup::start_depth(cfg.warmup);
  const warmup::Plan plan = warmup::make_plan(axes, limits, cfg.warmup, depth);
  const auto keys = eng.reachable_shape_keys();
  const auto unreached = warmup::unreached_buckets(plan, axes, limits);
  std::cout << "model " << cfg.model.path << ", max_model_len " << limits.max_model_len << ", max_num_seqs "
            << limits.max_num_seqs << ", max_num_batched_tokens " << limits.max_num_batched_tokens << "\n"
            << "axes (bucket representatives):\n"
            << "  step tokens:       " << join(axes.step_tokens) << "\n"
            << "  sampled sequences: " << join(axes.sampled_seqs) << "\n"
            << "  contexts:          " << join(axes.contexts) << "\n"
            << "  decode batches:    " << join(axes.decode_batches) << "\n"
            << "  graph sizes:       " << (axes.graph_sizes.empty() ? "none" : join(axes.graph_sizes)) << "\n"
            << "plan (" << (depth == warmup::Depth::least ? "least" : "full") << " work)"
            << (cfg.warmup.enable ? "" : " (disabled by [warmup] enable = false)") << ":\n"
            << warmup::describe(plan) << "reachable shape keys: " << keys.size() << "; plan covers "
            << (unreached.empty() ? "all of them" : "not all buckets") << "\n";
  for (const auto& u : unreached) std::cout << "  cannot be sure to reach " << u << "\n";
  if (args.has("keys"))
    for (const auto& k : keys) std::cout << "  " << k.str() << "\n";
  return unreached.empty() ? 0 : 1;
}

int rerun(const Args& args) {
  args.allow_only({"url", "admin-api-key", "timeout", "help"});
  const Url url = parse_url(args.get("url", "http://127.0.0.1:8000"));
  const std::string key = args.get("admin-api-key", "");
  const double timeout_s = args.get_double("timeout", 600);
  const HttpReply start = http_request(url, "POST", "/admin/warmup", "{}", std::chrono::seconds(10), key);
  if (start.status != 202) {
    std::cerr << "inferctl warmup: the daemon refused (" << start.status << "): " << start.body << "\n";
    return 1;
  }
  std::cout << "warm-up started; the endpoint is closed until it passes\n";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  std::string last;
  while (std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    HttpReply r;
    try {
      r = http_request(url, "GET", "/health/ready", {}, std::chrono::seconds(5));
    } catch (const std::runtime_error&) {
      std::cerr << "inferctl warmup: the daemon went away\n";
      return 1;
    }
    const auto body = boost::json::parse(r.body).as_object();
    const std::string state(body.at("state").as_string());
    const std::string activity(body.at("activity").as_string());
    if (activity != last && !activity.empty()) std::cout << "  " << activity << "\n";
    last = activity;
    if (state == "Serving") {
      const HttpReply rep = http_request(url, "GET", "/admin/warmup", {}, std::chrono::seconds(5), key);
      std::cout << "serving again; report: " << rep.body << "\n";
      return 0;
    }
    if (state == "Failed" || state == "Stopped" || state == "Draining") {
      std::cerr << "inferctl warmup: the daemon is " << state << "\n";
      return 1;
    }
  }
  std::cerr << "inferctl warmup: still not serving after " << timeout_s << " s\n";
  return 1;
}

}  // namespace

int cmd_warmup(const Args& args) {
  if (args.has("help")) {
    std::cout << kUsage;
    return 0;
  }
  return args.has("plan") ? show_plan(args) : rerun(args);
}

}  // namespace inferd::tools
