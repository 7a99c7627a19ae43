// `inferctl bench engine`: the engine alone, no HTTP. Prefill tok/s at given
// prompt lengths, decode tok/s at batch 1 (and aggregate at batch N), written as
// JSON. Tokens are seeded random ids, like llama-bench's, so numbers compare.
// Steps go through the executor, as the engine runs them: on CUDA, decode steps
// of the graph sizes run as CUDA graphs, recorded before timing.
#include <boost/json.hpp>
#include <algorithm>
#include <chrono>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "engine/gguf_reader.hpp"
#include "engine/hf_checkpoint.hpp"
#include "engine/executor.hpp"
#include "engine/kv/kv_cache.hpp"
#include "engine/models/model_registry.hpp"
#include "kernels/backend_factory.hpp"
#include "tools/inferctl_commands.hpp"

namespace inferd::tools {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

constexpr const char* kUsage =
    "usage: inferctl bench engine [--model PATH] [--threads N] [--n-prompt 128,512] [--n-gen 128]\n"
    "                             [--n-depth 0] [--batch 8] [--repetitions 3] [--device cpu|cuda[:N]]\n"
    "                             [--cuda-graph-sizes 1,2,4,8] [--enforce-eager] [--drafts 1,3,5]\n"
    "                             [--host-logits]\n"
    "The engine alone, as JSON: prefill tok/s at each prompt length; decode tok/s at batch 1, n-gen\n"
    "tokens after n-depth tokens already in the KV cache (llama-bench's tg with -d); and the\n"
    "aggregate of --batch streams decoding together. Median of --repetitions runs; seeded random\n"
    "token ids. --device cuda runs on CUDA device N (default 0), in builds with CUDA; there decode\n"
    "steps of --cuda-graph-sizes run as CUDA graphs (as inferd's), unless --enforce-eager.\n"
    "--drafts K,...: also the time of a speculative verify step of one stream (its last token and K\n"
    "drafts, logits at each of the 1 + K positions) against a decode step's, at the same depths.\n"
    "Where the model samples on its device (CUDA), each step draws its greedy tokens there and brings\n"
    "back only those, as inferd does for such requests; --host-logits brings back every row's logits\n"
    "instead (the path of requests with penalties, logprobs or a grammar).\n";

}  // namespace

int cmd_bench_engine(const Args& args) {
  if (args.has("help")) {
    std::cout << kUsage;
    return 0;
  }
  args.allow_only({"model", "threads", "repetitions", "n-gen", "n-depth", "batch", "n-prompt", "device",
                   "cuda-graph-sizes", "enforce-eager", "drafts", "host-logits"});
  const std::string model_path = args.get("model", default_model_path());
  const int threads = args.get_int("threads", 0);
  const int reps = args.get_int("repetitions", 3);
  const int n_gen = args.get_int("n-gen", 128);
  const int batch = args.get_int("batch", 8);
  const int depth = std::max(0, args.get_int("n-depth", 0));
  std::vector<int> prompts;
  for (const auto& p : args.get_list("n-prompt", {"128", "512"})) prompts.push_back(std::stoi(p));
  std::vector<int> drafts;
  for (const auto& d : args.get_list("drafts", {})) {
    drafts.push_back(std::stoi(d));
    if (drafts.back() < 1) throw std::invalid_argument("--drafts: each must be at least 1, got " + d);
  }
  const int most_drafts = drafts.empty() ? 0 : *std::max_element(drafts.begin(), drafts.end());
  std::vector<int> graph_sizes;
  if (args.get("enforce-eager", "false") != "true")
    for (const auto& g : args.get_list("cuda-graph-sizes", {"1", "2", "4", "8"})) graph_sizes.push_back(std::stoi(g));

  const std::string device = args.get("device", "cpu");
  if (std::string why = kernels::device_error(device); !why.empty()) throw std::invalid_argument("--device " + why);
  auto backend = kernels::make_backend(device, threads);
  auto file = engine::open_model(model_path);  // a GGUF file or a checkpoint directory
  auto model = engine::load_model(*file, *backend);
  const auto& mc = model->config();
  const int max_prompt = *std::max_element(prompts.begin(), prompts.end());
  const int ctx = std::max(max_prompt, depth + n_gen + most_drafts) + 16;
  const int bs = 16, blocks_per_seq = (ctx + bs - 1) / bs;
  engine::KvGeometry g{mc.n_layers, mc.n_kv_heads, mc.head_dim, bs, blocks_per_seq * std::max(batch, 1),
                       kernels::DType::F16};
  engine::KvCache kv(g, *backend);
  std::vector<std::vector<int32_t>> tables(std::max(batch, 1), std::vector<int32_t>(blocks_per_seq));
  for (size_t s = 0; s < tables.size(); ++s)
    for (int i = 0; i < blocks_per_seq; ++i) tables[s][i] = int32_t(s * blocks_per_seq + i);

  std::mt19937 rng(42);
  std::uniform_int_distribution<int32_t> tok(0, mc.vocab - 1);
  std::vector<float> logits;
  graph_sizes = engine::graph_sizes_for(*backend, graph_sizes, std::max(batch, 1), std::max(batch, max_prompt));
  engine::Executor exec(*model, kv, *backend, graph_sizes);
  const bool device_draws = model->samples_on_device() && args.get("host-logits", "false") != "true";
  std::vector<kernels::RowSampling> greedy;  // one per logits row
  std::vector<int32_t> tokens;
  std::string graphs;
  for (int g : graph_sizes) graphs.append(graphs.empty() ? "" : ",").append(std::to_string(g));
  boost::json::object out{{"model", model_path}, {"backend", backend->name()}, {"threads", backend->threads()},
                          {"graph_sizes", graphs}, {"sampling", device_draws ? "device greedy" : "host logits"}};

  // One step: stream s feeds n random tokens from position `start`, the last
  // `n_drafts` of them as drafts (logits at each).
  uint64_t step_no = 0;
  auto run = [&](int streams, int start, int n, int n_drafts = 0) {
    engine::StepPlan plan;
    plan.step = ++step_no;
    for (int s = 0; s < streams; ++s) {
      engine::ScheduledSeq q;
      q.seq = static_cast<engine::SeqId>(s + 1);
      q.start = start;
      for (int i = 0; i < n; ++i) q.tokens.push_back(tok(rng));
      q.block_table = tables[s];
      q.sample = true;
      q.num_drafts = n_drafts;
      plan.seqs.push_back(std::move(q));
    }
    if (!device_draws) return exec.execute(plan, logits);
    greedy.assign(static_cast<size_t>(streams) * (1 + n_drafts), kernels::RowSampling{});
    exec.execute(plan, greedy, false, logits, tokens);
  };

  // Warm the caches and the thread pool once so the first repetition is not an
  // outlier; on CUDA this records the decode graphs the timed runs replay, and a
  // prompt-sized step sets up the tensor-core path (cuBLAS, its scratch) that a
  // first timed prefill would otherwise pay for (llama-bench warms up likewise).
  run(1, 0, std::min(max_prompt, 512));
  run(1, 0, 8);
  run(1, 8, 1);
  if (batch > 1) run(batch, 8, 1);

  boost::json::array prefill;
  for (int n : prompts) {
    std::vector<double> times;
    for (int r = 0; r < reps; ++r) {
      auto t0 = Clock::now();
      run(1, 0, n);
      times.push_back(seconds_since(t0));
    }
    const double t = median(times);
    prefill.push_back({{"n_prompt", n}, {"seconds", t}, {"tokens_per_s", n / t}});
  }
  out["prefill"] = prefill;

  // Each stream's first `depth` positions hold a prompt before decode is timed.
  if (depth > 0)
    for (int s = 0; s < std::max(batch, 1); ++s) {
      engine::StepPlan plan;
      engine::ScheduledSeq q;
      q.seq = 1;
      for (int i = 0; i < depth; ++i) q.tokens.push_back(tok(rng));
      q.block_table = tables[s];
      q.sample = true;
      plan.seqs.push_back(std::move(q));
      exec.execute(plan, logits);
    }
  // Steps per second of n_gen steps, each feeding 1 + k tokens per stream
  // (k drafts), the next step one position on as after a rejected draft.
  auto steps_per_s = [&](int streams, int k) {
    std::vector<double> rates;
    for (int r = 0; r < reps; ++r) {
      auto t0 = Clock::now();
      for (int i = 0; i < n_gen; ++i) run(streams, depth + i, 1 + k, k);
      rates.push_back(double(n_gen) / seconds_since(t0));
    }
    return median(rates);
  };
  const double decode_steps = steps_per_s(1, 0);
  out["decode"] = {{"n_gen", n_gen}, {"n_depth", depth}, {"batch", 1}, {"tokens_per_s", decode_steps}};
  if (!drafts.empty()) {
    boost::json::array verify;
    for (int k : drafts) {
      const double v = steps_per_s(1, k);
      verify.push_back({{"drafts", k}, {"step_ms", 1e3 / v}, {"cost_vs_decode", decode_steps / v}});
    }
    out["verify"] = verify;
  }
  if (batch > 1) {
    const double agg = steps_per_s(batch, 0) * batch;
    out["decode_batched"] = {{"n_gen", n_gen}, {"n_depth", depth}, {"batch", batch}, {"aggregate_tokens_per_s", agg},
                             {"per_stream_tokens_per_s", agg / batch}};
  }
  std::cout << boost::json::serialize(out) << "\n";
  return 0;
}

}  // namespace inferd::tools
