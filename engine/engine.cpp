#include "engine/engine.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>

#include "engine/chat_template.hpp"
#include "engine/executor.hpp"
#include "engine/gguf_reader.hpp"
#include "engine/hf_checkpoint.hpp"
#include "engine/grammar/matcher.hpp"
#include "engine/grammar/token_mask.hpp"
#include "engine/kv/gpu_kv_budget.hpp"
#include "engine/kv/kv_cache.hpp"
#include "engine/kv/kv_cache_manager.hpp"
#include "engine/output/output_stream.hpp"
#include "engine/sched/scheduler.hpp"
#include "engine/spec/draft_head_proposer.hpp"
#include "engine/spec/draft_model_proposer.hpp"
#include "engine/step_heartbeat.hpp"
#include "engine/tokenizer.hpp"
#include "faults/fault_points.hpp"
#include "kernels/shape_tracer.hpp"

namespace inferd::engine {

using Clock = std::chrono::steady_clock;

struct Engine::Live {
  SeqId id = 0;
  GenerationRequest req;
  std::shared_ptr<RequestHandle> handle = std::make_shared<RequestHandle>();
  Sampler sampler;
  OutputStream out;
  Clock::time_point arrival = Clock::now();
  int n_generated = 0;
  int cached_tokens = 0;
  bool sent_first = false;
  std::optional<grammar::Matcher> matcher;  // with a grammar: where the output is in it
  grammar::TokenSet allowed;                // scratch: the tokens it allows next
  std::vector<int32_t> stop_tokens;         // the scheduler's: allowed once the output is whole

  Live(SeqId id, GenerationRequest r, const Tokenizer& tok)
      : id(id), req(std::move(r)), sampler(req.sampling), out(tok, req.skip_special_tokens, req.stop) {
    if (req.grammar) matcher.emplace(req.grammar);
  }

};

int resolve_max_model_len(const ModelConfig& mc, int asked) {
  if (asked > mc.max_context)
    throw std::invalid_argument("max_model_len " + std::to_string(asked) + " exceeds the model's trained context of " +
                                std::to_string(mc.max_context) + " tokens");
  return asked > 0 ? asked : mc.max_context;
}

KvGeometry plan_kv_cache(const ModelConfig& mc, int max_model_len, const EngineOptions& opts) {
  KvGeometry g;
  g.n_layers = mc.kv_layers > 0 ? mc.kv_layers : mc.n_layers;
  g.n_kv_heads = mc.n_kv_heads;
  g.head_dim = mc.head_dim;
  g.block_size = opts.block_size;
  // Counted on the whole model's heads, so every rank of a group has the same
  // number of blocks (the head's block tables address them all); a rank then
  // holds only its own kv heads of each.
  const size_t per_block = g.bytes_per_block_layer() * 2 * g.n_layers;
  const int min_blocks = (max_model_len + g.block_size - 1) / g.block_size + 1;
  g.num_blocks = opts.num_kv_blocks > 0    ? opts.num_kv_blocks
                 : opts.kv_cache_bytes == 0 ? min_blocks
                                            : static_cast<int>(opts.kv_cache_bytes / per_block);
  // The cache never grows past what was configured: too small is an error naming the numbers.
  if (g.num_blocks < min_blocks)
    throw std::invalid_argument(
        "kv cache of " + std::to_string(g.num_blocks) + " blocks (" +
        std::to_string(static_cast<size_t>(g.num_blocks) * per_block / 1048576) + " MiB, " +
        std::to_string(g.num_blocks * g.block_size) + " tokens) cannot hold one sequence of max_model_len " +
        std::to_string(max_model_len) + " tokens: raise kv_cache_bytes to at least " +
        std::to_string((static_cast<size_t>(min_blocks) * per_block + 1048575) / 1048576) + " MiB or lower max_model_len");
  g.n_kv_heads = mc.kv_heads_here;
  return g;
}

Engine::Engine(const EngineOptions& opts, StepHeartbeat* heartbeat) : opts_(opts), heartbeat_(heartbeat) {
  backend_ = opts_.backend ? opts_.backend() : kernels::make_cpu_backend(opts_.threads);
  backend_->set_cancel_flag(&abort_step_);  // a reset abandons the step at its next op or task
  file_ = open_model(opts_.model_path);
  // The stages after the weights repeat the weights' final counts under their own name.
  LoadProgress last;
  auto progress = [&](const LoadProgress& p) {
    last = p;
    if (opts_.on_load_progress) opts_.on_load_progress(p);
  };
  auto stage = [&](std::string_view name) {
    last.stage = name;
    progress(last);
  };
  model_ = load_model(*file_, *backend_, precision_, progress, opts_.tp);
  // Fault point "load.stall=MS": the load hangs here for MS ms (default an hour),
  // as one stuck on a hung disk or driver would.
  static const faults::FaultPoint load_stall("load.stall");
  if (load_stall.armed()) {
    const auto ms = load_stall.int_value(3600 * 1000);
    spdlog::warn("fault point load.stall: the load hangs for {} ms", ms);
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  }
  stage("tokenizer");
  tokenizer_ = Tokenizer::from_gguf(*file_);
  chat_ = std::make_unique<ChatTemplate>(opts_.chat_template_path.empty()
                                             ? ChatTemplate::from_gguf(*file_, *tokenizer_)
                                             : ChatTemplate::from_file(opts_.chat_template_path, *tokenizer_));
  const auto& mc = model_->config();
  // Models often pad their embedding and output past the tokenizer's last token
  // (to a multiple of 64 or 128): those ids have no text and are masked out of
  // sampling. The other way round the tokenizer would name ids the model cannot
  // produce or read, so the file is refused.
  n_tokens_ = static_cast<int>(tokenizer_->vocab_size());
  {
    // What each token writes; control tokens write nothing, so no grammar allows them.
    std::vector<std::string> bytes(tokenizer_->vocab_size());
    for (int32_t id = 0; id < n_tokens_; ++id) bytes[static_cast<size_t>(id)] = tokenizer_->piece(id, /*skip_special=*/true);
    token_index_ = std::make_unique<grammar::TokenIndex>(std::move(bytes));
  }
  if (n_tokens_ > mc.vocab)
    throw std::invalid_argument(file_->path() + ": the tokenizer has " + std::to_string(n_tokens_) +
                                " tokens (tokenizer.ggml.tokens) but the model has only " + std::to_string(mc.vocab) +
                                " (rows of its embedding and output): the tokenizer does not belong to these weights");
  if (n_tokens_ < mc.vocab)
    spdlog::info("engine: the model outputs {} ids, the tokenizer has {} tokens; the {} padding ids are never sampled",
                 mc.vocab, n_tokens_, mc.vocab - n_tokens_);
  max_model_len_ = resolve_max_model_len(mc, opts_.max_model_len);
  if (opts_.speculative) {
    // A group's workers build their batch from the plan without its drafts' logits rows.
    if (opts_.tp.size > 1)
      throw std::invalid_argument("speculative decoding is not supported with tensor parallelism (tensor_parallel_size " +
                                  std::to_string(opts_.tp.size) + ")");
    if (model_->holds_sequence_state())
      throw std::invalid_argument("speculative decoding is not supported for " + mc.architecture +
                                  " (its state cannot roll back rejected drafts)");
    if (!opts_.draft_model.empty() && !opts_.draft_head.empty())
      throw std::invalid_argument("speculative decoding takes a draft model or a draft head, not both");
    if (!opts_.draft_model.empty()) {
      // Before the KV cache is sized: on a device, the draft's weights and cache are in use.
      stage("draft_model");
      const DraftLimits dl{max_model_len_, opts_.max_num_batched_tokens, opts_.block_size, opts_.kv_cache_bytes,
                           precision_};
      auto draft = std::make_unique<DraftModelProposer>(
          DraftModelOptions{opts_.draft_model, opts_.speculative->num_speculative_tokens}, *backend_, *tokenizer_, dl);
      draft_ = draft.get();
      if (heartbeat_) draft_->on_forward([hb = heartbeat_](uint64_t work) { hb->begin_step(work); });
      proposer_ = std::move(draft);
    } else if (!opts_.draft_head.empty()) {
      proposer_ = std::make_unique<DraftHeadProposer>(
          DraftHeadOptions{opts_.draft_head, opts_.speculative->num_speculative_tokens, n_tokens_, last.bytes_total,
                           opts_.speculative->prompt_lookup_max > 0 ? opts_.speculative : std::nullopt},
          *backend_, *model_, *file_);
    } else {
      proposer_ = std::make_unique<NgramProposer>(*opts_.speculative);
    }
  }
  const KvGeometry g =
      plan_kv_cache(mc, max_model_len_, kv_sized_by_device(opts_, *backend_, mc, max_model_len_, last.bytes_total));
  model_->check_kv_cache(g);
  stage("kv_cache");
  kv_ = std::make_unique<KvCache>(g, *backend_);
  // A state the model holds itself only moves forward: no sequence may start
  // from another's cached prefix, and no draft may be rolled back.
  const bool own_state = model_->holds_sequence_state();
  if (own_state && opts_.enable_prefix_caching)
    spdlog::info("engine: {} keeps each sequence's state itself: prefix caching is off", mc.architecture);
  if (own_state && opts_.tp.size > 1)
    throw std::invalid_argument(mc.architecture + " does not run with tensor parallelism yet (tensor_parallel_size " +
                                std::to_string(opts_.tp.size) + ")");
  kv_manager_ = std::make_unique<KvCacheManager>(g.num_blocks, g.block_size, opts_.enable_prefix_caching && !own_state);
  SchedulerLimits limits{opts_.max_num_seqs, opts_.max_num_batched_tokens, max_model_len_};
  if (opts_.speculative) {
    limits.num_speculative_tokens = opts_.speculative->num_speculative_tokens;
    spec_accepted_per_pos_ = std::vector<std::atomic<uint64_t>>(static_cast<size_t>(limits.num_speculative_tokens));
  }
  scheduler_ = std::make_unique<Scheduler>(limits, *kv_manager_, proposer_.get());
  // A rank of a group too: its collectives are queued among its ops (Backend::queue_external).
  graph_sizes_ = graph_sizes_for(*backend_, opts_.graph_sizes, opts_.max_num_seqs, opts_.max_num_batched_tokens);
  executor_ = std::make_unique<Executor>(*model_, *kv_, *backend_, graph_sizes_);
  std::string graphs;
  for (int s : graph_sizes_) graphs.append(graphs.empty() ? "" : ",").append(std::to_string(s));
  spdlog::info("engine: {} ({} layers, dim {}, vocab {}), max_model_len {}, kv cache {} blocks x {} tokens ({:.0f} MiB), "
               "{} threads ({}), decode graphs: {}",
               mc.name, mc.n_layers, mc.dim, mc.vocab, max_model_len_, g.num_blocks, g.block_size,
               g.total_bytes() / 1048576.0, backend_->threads(), backend_->name(),
               !graphs.empty() ? graphs : backend_->can_capture() ? "none (eager)" : "none (not on this backend)");
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() { stop(); }

EngineOptions kv_sized_by_device(const EngineOptions& opts, kernels::Backend& backend, const ModelConfig& mc,
                                 int max_model_len, size_t weights_bytes) {
  EngineOptions o = opts;
  if (opts.gpu_memory_utilization <= 0 || opts.num_kv_blocks > 0) return o;
  const auto mem = backend.memory_info();
  if (!mem) return o;
  KvGeometry one;
  one.n_layers = mc.kv_layers > 0 ? mc.kv_layers : mc.n_layers;
  one.n_kv_heads = mc.kv_heads_here;
  one.head_dim = mc.head_dim;
  one.block_size = opts.block_size;
  const int spec = opts.speculative ? opts.speculative->num_speculative_tokens : 0;
  GpuKvBudget b;
  b.total = mem->total;
  b.free_after_weights = mem->free;
  b.fraction = opts.gpu_memory_utilization;
  b.bytes_per_block = one.bytes_per_block_layer() * 2 * size_t(one.n_layers);
  b.scratch = step_scratch_bound(mc, opts.max_num_batched_tokens, int64_t(opts.max_num_seqs) * (1 + spec));
  b.min_blocks = (max_model_len + opts.block_size - 1) / opts.block_size + 1;
  b.max_model_len = max_model_len;
  b.weights = weights_bytes;
  const GpuKvPlan p = plan_gpu_kv_blocks(b);
  spdlog::info("engine: --gpu-memory-utilization {}: {:.0f} of {:.0f} MiB allowed, {:.0f} MiB in use after the weights, "
               "{:.0f} MiB kept for a step's buffers: the KV cache gets {} blocks ({:.0f} MiB)",
               b.fraction, p.limit / 1048576.0, b.total / 1048576.0, p.in_use / 1048576.0, b.scratch / 1048576.0,
               p.blocks, p.kv_bytes / 1048576.0);
  o.num_kv_blocks = p.blocks;
  if (opts.tp.comm) {
    // Every rank sizes its cache by its own device, but the head's block tables
    // address the same blocks on all: the group takes the fewest.
    const int n = opts.tp.size;
    const float mine = static_cast<float>(p.blocks);  // exact: far below 2^24 blocks
    kernels::Buffer in = backend.alloc(sizeof(float)), out = backend.alloc(n * sizeof(float));
    backend.upload(in.data(), &mine, sizeof mine);
    backend.synchronize();
    opts.tp.comm->all_gather(in.as<float>(), 1, out.as<float>());
    std::vector<float> all(static_cast<size_t>(n));
    backend.download(all.data(), out.data(), all.size() * sizeof(float));
    o.num_kv_blocks = static_cast<int>(*std::min_element(all.begin(), all.end()));
    if (o.num_kv_blocks != p.blocks)
      spdlog::info("engine: the group's smallest KV cache is {} blocks: this rank takes as many", o.num_kv_blocks);
  }
  return o;
}

ShapeAxes Engine::shape_axes() const {
  return engine::shape_axes(opts_.max_num_batched_tokens, opts_.max_num_seqs, max_model_len_, graph_sizes_);
}

std::vector<kernels::ShapeKey> Engine::reachable_shape_keys() const {
  auto keys = engine::reachable_shape_keys(*file_, precision_, opts_.tp, kv_->geometry(), shape_axes());
  if (proposer_) {
    for (auto& k : proposer_->reachable_shape_keys(shape_axes()))
      if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(std::move(k));
    std::sort(keys.begin(), keys.end(), [](const auto& a, const auto& b) { return a.str() < b.str(); });
  }
  return keys;
}

void Engine::warm_proposer() {
  if (!proposer_) return;
  std::unique_lock lk(mu_);
  const uint64_t asked = ++proposer_warms_asked_;
  cv_.notify_all();
  proposer_warm_cv_.wait(lk, [&] { return proposer_warms_done_ >= asked || stopping_; });
  if (stopping_) throw std::runtime_error("the engine stopped");
  if (!proposer_warm_error_.empty()) throw std::runtime_error(proposer_warm_error_);
}

void Engine::stop() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
    abort_step_ = true;  // what a step was computing is dropped: everything in it ends with an error
  }
  cv_.notify_all();
  reset_cv_.notify_all();  // a reset waiting for the group to re-form gives up
  proposer_warm_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::unique_ptr<Engine::Live> Engine::make_live(GenerationRequest req) {
  const int n = static_cast<int>(req.prompt.size());
  if (n == 0) throw InvalidRequest("prompt", "the prompt is empty");
  for (int32_t t : req.prompt)
    if (t < 0 || t >= n_tokens_)
      throw InvalidRequest("prompt", "token id " + std::to_string(t) + " is out of range");
  if (n >= max_model_len_)
    throw InvalidRequest("prompt", "the prompt has " + std::to_string(n) + " tokens; this model's maximum context length is " +
                                       std::to_string(max_model_len_) + " tokens");
  if (req.max_tokens < 1) throw InvalidRequest("max_tokens", "max_tokens must be at least 1");
  if (req.unwritten_prefix < 0 || req.unwritten_prefix >= n)
    throw InvalidRequest("unwritten_prefix", "the unwritten prefix must leave at least the prompt's last token to run");
  if (static_cast<int64_t>(n) + req.max_tokens > max_model_len_)
    throw InvalidRequest("max_tokens", "the prompt (" + std::to_string(n) + " tokens) plus max_tokens (" +
                                           std::to_string(req.max_tokens) + ") exceeds the maximum context length of " +
                                           std::to_string(max_model_len_) + " tokens");
  return std::make_unique<Live>(next_id_.fetch_add(1), std::move(req), *tokenizer_);
}

std::shared_ptr<RequestHandle> Engine::submit(GenerationRequest req) {
  std::vector<std::unique_ptr<Live>> one;
  one.push_back(make_live(std::move(req)));
  auto handle = one.front()->handle;
  enqueue(std::move(one), true);
  return handle;
}

std::vector<std::shared_ptr<RequestHandle>> Engine::submit_together(std::vector<GenerationRequest> reqs) {
  std::vector<std::unique_ptr<Live>> lives;
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (auto& r : reqs) {
    lives.push_back(make_live(std::move(r)));
    handles.push_back(lives.back()->handle);
  }
  enqueue(std::move(lives), false);
  return handles;
}

void Engine::enqueue(std::vector<std::unique_ptr<Live>> reqs, bool queue_limit) {
  {
    std::lock_guard lk(mu_);
    if (stopping_) throw QueueFull("the engine is stopping");
    // n_waiting_ counts the inbox too: submit adds to it, each step recounts both under this lock.
    if (queue_limit && static_cast<size_t>(n_waiting_.load()) + reqs.size() > opts_.max_waiting)
      throw QueueFull("too many queued requests (" + std::to_string(opts_.max_waiting) + ")");
    for (auto& r : reqs) inbox_.push_back(std::move(r));
    n_waiting_.fetch_add(static_cast<int>(reqs.size()));
  }
  cv_.notify_one();
}

EngineStats Engine::stats() const {
  EngineStats st;
  st.running = n_running_.load();
  st.waiting = n_waiting_.load();
  st.kv_blocks_total = kv_manager_ ? kv_manager_->num_blocks() : 0;
  st.kv_blocks_used = kv_used_.load();
  st.prompt_tokens_total = prompt_total_.load();
  st.generation_tokens_total = gen_total_.load();
  st.prefix_queries_tokens = prefix_q_.load();
  st.prefix_hits_tokens = prefix_hit_.load();
  st.preemptions_total = preempt_total_.load();
  st.steps_total = steps_total_.load();
  st.spec_drafts = spec_drafts_.load();
  st.spec_draft_tokens = spec_draft_tokens_.load();
  st.spec_accepted_tokens = spec_accepted_.load();
  for (const auto& n : spec_accepted_per_pos_) st.spec_accepted_per_pos.push_back(n.load());
  return st;
}

void Engine::take_inbox() {
  while (!inbox_.empty()) {
    auto r = std::move(inbox_.front());
    inbox_.pop_front();
    Live& l = *r;
    SeqSpec spec{l.id, l.req.prompt, l.req.max_tokens, {}, l.req.priority};
    spec.speculate = proposer_ != nullptr && l.req.speculate && !l.req.grammar;
    spec.unwritten_prefix = l.req.unwritten_prefix;
    if (!l.req.ignore_eos) {
      spec.stop_tokens = tokenizer_->stop_ids();
      spec.stop_tokens.insert(spec.stop_tokens.end(), l.req.stop_token_ids.begin(), l.req.stop_token_ids.end());
    }
    l.stop_tokens = spec.stop_tokens;
    scheduler_->add(std::move(spec));
    live_.emplace(l.id, std::move(r));
  }
}

void Engine::loop() {
  for (;;) {
    {
      std::unique_lock lk(mu_);
      if (heartbeat_ && inbox_.empty() && scheduler_->idle()) heartbeat_->set_idle();
      // A broken group runs nothing until a reset re-forms it.
      cv_.wait(lk, [&] {
        return stopping_ || reset_reason_ || proposer_warms_asked_ > proposer_warms_done_ ||
               (!group_broken_ && (!inbox_.empty() || !scheduler_->idle()));
      });
      if (reset_reason_) {
        const std::string reason = *reset_reason_;
        std::vector<std::unique_ptr<Live>> interrupted = do_reset(reason);
        ++resets_begun_;
        reset_cv_.notify_all();
        std::string failure;
        if (!interrupted.empty() || opts_.reform_group) {
          // Outside the lock. A request's sink takes its client's lock, which
          // the client may hold while it submits, waiting for this one
          // (ThreadSanitizer: lock-order inversion). Re-forming waits for
          // every rank, and submit() must not.
          lk.unlock();
          for (auto& r : interrupted)
            end(*r, FinishReason::Error, "interrupted by a recovery (" + reason + ") after it had produced output");
          interrupted.clear();
          if (opts_.reform_group) failure = reform_group(reason);
          lk.lock();
        }
        reset_reason_.reset();
        abort_step_ = false;
        group_broken_ = !failure.empty();
        last_reset_failure_ = std::move(failure);
        ++resets_done_;
        reset_cv_.notify_all();
      }
      take_inbox();
      if (stopping_) break;
      if (proposer_warms_asked_ > proposer_warms_done_) {
        const uint64_t asked = proposer_warms_asked_;
        lk.unlock();
        std::string error;
        try {
          proposer_->warm(shape_axes());
        } catch (const std::exception& e) {
          error = e.what();
        }
        if (heartbeat_) heartbeat_->set_idle();  // its forwards began steps on the heartbeat
        lk.lock();
        proposer_warm_error_ = std::move(error);
        proposer_warms_done_ = asked;
        proposer_warm_cv_.notify_all();
      }
    }
    drop_cancelled();
    step();
    publish_stats();
  }
  for (auto& [id, r] : live_) end(*r, FinishReason::Error, "the engine stopped");
  live_.clear();
  scheduler_->clear();
  n_running_.store(0);
  n_waiting_.store(0);
}

void Engine::publish_stats() {
  n_running_.store(static_cast<int>(scheduler_->num_running()));
  {
    std::lock_guard lk(mu_);
    n_waiting_.store(static_cast<int>(scheduler_->num_waiting() + inbox_.size()));
  }
  kv_used_.store(kv_manager_->num_used_blocks());
  const auto& c = scheduler_->counters();
  prefix_q_.store(c.prefix_query_tokens);
  prefix_hit_.store(c.prefix_hit_tokens);
  preempt_total_.store(c.preemptions);
  steps_total_.store(c.steps);
}

void Engine::drop_cancelled() {
  std::vector<SeqId> gone;
  for (auto& [id, r] : live_)
    if (r->handle->cancelled()) gone.push_back(id);
  for (SeqId id : gone) {
    live_.at(id)->cached_tokens = scheduler_->view(id).cached_tokens;
    scheduler_->finish(id);
    end(*live_.at(id), FinishReason::Cancelled);
    live_.erase(id);
  }
}

std::optional<std::string> Engine::reset(const std::string& reason, std::chrono::milliseconds timeout) {
  std::unique_lock lk(mu_);
  const uint64_t target = resets_done_ + 1;
  reset_reason_ = reason;
  abort_step_ = true;
  // A step blocked in a collective (a peer stalled or gone) returns at once.
  if (opts_.tp.comm) opts_.tp.comm->abort("engine reset: " + reason);
  cv_.notify_all();
  if (!reset_cv_.wait_for(lk, timeout, [&] { return resets_begun_ >= target || stopping_; }))
    return fmt::format("the engine did not leave its step within {} ms of a reset", timeout.count());
  // Re-forming the group waits for ranks to rejoin, within bounds of its own.
  reset_cv_.wait(lk, [&] { return resets_done_ >= target || stopping_; });
  if (stopping_) return std::string("the engine is stopping");
  if (!last_reset_failure_.empty()) return last_reset_failure_;
  return std::nullopt;
}

std::string Engine::reform_group(const std::string& reason) {
  try {
    opts_.reform_group(reason);
    return {};
  } catch (const std::exception& e) {
    spdlog::error("engine reset: the tensor-parallel group did not re-form: {}", e.what());
    return std::string("the tensor-parallel group did not re-form: ") + e.what();
  }
}

void Engine::release_held() {
  {
    std::lock_guard lk(mu_);
    n_waiting_.fetch_add(static_cast<int>(held_.size()));
    while (!held_.empty()) {
      inbox_.push_front(std::move(held_.back()));
      held_.pop_back();
    }
  }
  cv_.notify_one();
}

std::vector<std::unique_ptr<Engine::Live>> Engine::do_reset(const std::string& reason) {
  std::vector<std::unique_ptr<Live>> interrupted;
  int held = 0;
  auto sort = [&](std::unique_ptr<Live> r) {
    if (r->n_generated == 0) {
      held_.push_back(std::move(r));
      ++held;
    } else {
      interrupted.push_back(std::move(r));
    }
  };
  // Running first, then waiting, then the inbox: the order they run again in.
  for (SeqId id : scheduler_->clear()) sort(std::move(live_.at(id)));
  live_.clear();
  model_->drop_sequences();
  while (!inbox_.empty()) {
    sort(std::move(inbox_.front()));
    inbox_.pop_front();
  }
  n_running_.store(0);
  n_waiting_.store(0);
  kv_used_.store(kv_manager_->num_used_blocks());
  spdlog::warn("engine reset ({}): {} requests held to run again, {} ended with an error", reason, held,
               interrupted.size());
  return interrupted;
}

// Fault point "step.stall=MS": the next step hangs for MS milliseconds (default
// an hour) unless a reset aborts it; it fires once.
void Engine::stall_if_armed() {
  static const faults::FaultPoint stall("step.stall");
  if (!stall.armed()) return;
  const auto until = Clock::now() + std::chrono::milliseconds(stall.int_value(3600 * 1000));
  faults::disarm_fault("step.stall");
  spdlog::warn("fault point step.stall: this step hangs");
  while (Clock::now() < until && !abort_step_.load())
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

// Fault point "logits.corrupt": while armed, every row's best token is pushed to
// the bottom, as a corrupted weight or KV block would skew it (the logits are
// then brought back for every row, not drawn on the device).
const faults::FaultPoint logits_corrupt("logits.corrupt");

void Engine::corrupt_if_armed() {
  if (!logits_corrupt.armed()) return;
  const size_t vocab = static_cast<size_t>(model_->config().vocab);
  for (size_t r = 0; r * vocab < logits_.size(); ++r) {
    float* row = logits_.data() + r * vocab;
    *std::max_element(row, row + vocab) = -1e30f;
  }
}

void Engine::step() {
  // A draft model drafts inside schedule(), each forward begun on the heartbeat
  // as a step of its own, so a wedged draft is seen like a wedged step.
  const StepPlan plan = scheduler_->schedule();
  // Even when nothing runs this step: a model that holds states lets these go.
  model_->release_sequences(plan.finished);
  model_->release_sequences(plan.preempted);
  if (plan.empty()) {
    if (heartbeat_ && draft_) heartbeat_->set_idle();  // drafts were made for a step that did not come
    return;
  }
  // Counts first: a client that sees this step's tokens must find the requests
  // it admitted counted as running, not still waiting (admission reads them).
  publish_stats();
  std::optional<DeviceDraws> draws;
  if (model_->samples_on_device()) draws = plan_device_draws(plan);
  try {
    if (heartbeat_) heartbeat_->begin_step(plan.work());
    stall_if_armed();
    if (opts_.on_plan) opts_.on_plan(plan);  // the group's workers run it beside this rank
    if (draws)
      executor_->execute(plan, draws->params, draws->logits_too, logits_, draws->tokens);
    else
      executor_->execute(plan, logits_, proposer_ && proposer_->reads_features() ? &features_ : nullptr);
    if (opts_.tp.comm) opts_.tp.comm->settle();  // its collectives ran on the device's queue
    corrupt_if_armed();
    if (heartbeat_) heartbeat_->end_step();
  } catch (const kernels::Cancelled&) {
    // A reset abandoned the step: the reset decides what becomes of its requests.
    if (heartbeat_) heartbeat_->end_step();
    spdlog::warn("engine step cancelled by a reset");
    return;
  } catch (const comm::CollectiveError& e) {
    // The group broke under this step (a rank left, or the data plane was
    // aborted): nothing runs until a reset re-forms it, and the reset decides
    // what becomes of this step's requests, as for a wedge.
    if (heartbeat_) heartbeat_->end_step();
    spdlog::error("engine step: the tensor-parallel group broke: {}", e.what());
    std::lock_guard lk(mu_);
    group_broken_ = true;
    return;
  } catch (const std::exception& e) {
    if (abort_step_.load()) {
      // A reset aborted the group's collective this step was in: as above.
      if (heartbeat_) heartbeat_->end_step();
      spdlog::warn("engine step aborted by a reset: {}", e.what());
      return;
    }
    // A failing step must not take the process down: fail what was in it.
    spdlog::error("engine step failed: {}", e.what());
    if (heartbeat_) heartbeat_->end_step();
    for (const auto& s : plan.seqs) {
      scheduler_->finish(s.seq);
      if (auto it = live_.find(s.seq); it != live_.end()) {
        end(*it->second, FinishReason::Error, std::string("engine step failed: ") + e.what());
        live_.erase(it);
      }
    }
    return;
  }
  // A reset cut this step short: its results are suspect and nothing is sampled
  // from them, so a request that had produced nothing still has produced nothing.
  if (abort_step_.load()) return;

  // Sample each sampled sequence from its rows of the logits, in plan order.
  std::vector<SampledToken> sampled;
  std::vector<SampleResult> results;
  int row = 0;
  for (const auto& s : plan.seqs) {
    if (!s.sample) continue;
    sample_seq(s, row, draws ? &*draws : nullptr, sampled, results);
    row += s.logits_rows();
  }
  const auto outcomes = scheduler_->update(plan, sampled);

  const auto now = Clock::now();
  for (size_t i = 0; i < outcomes.size(); ++i) {
    const TokenOutcome& o = outcomes[i];
    auto live = live_.find(o.seq);
    if (live == live_.end()) continue;  // a stop string ended it at an earlier token of this step
    Live& r = *live->second;
    ++r.n_generated;
    gen_total_.fetch_add(1);
    Delta d;
    SampleResult& res = results[o.sampled_index];
    TokenOut t{o.token, res.logprob, {}};
    if (r.req.sampling.logprobs >= 0) t.top = std::move(res.top);
    d.tokens.push_back(std::move(t));
    if (!r.sent_first) {
      d.ttft_s = std::chrono::duration<double>(now - r.arrival).count();
      r.sent_first = true;
    }
    FinishReason why = o.finish;
    if (r.matcher && why != FinishReason::Stop && !r.matcher->accept(token_index_->bytes(o.token))) {
      if (why == FinishReason::None) scheduler_->finish(o.seq);
      end(r, FinishReason::Error, "no token of the vocabulary continues the output within its response_format",
          std::move(d));
      live_.erase(o.seq);
      continue;
    }
    if (why == FinishReason::Stop) {  // a stop token: its own text is never shown
      d.text = r.out.finish();
    } else if (r.matcher && r.matcher->finished()) {
      // The JSON is whole and nothing may follow: done, even on the last token max_tokens allowed.
      d.text = r.out.push(o.token);
      if (r.out.stopped()) d.stop_reason = r.out.matched();
      else d.text += r.out.finish();
      if (why == FinishReason::None) scheduler_->finish(o.seq);
      why = FinishReason::Stop;
    } else {
      d.text = r.out.push(o.token);
      if (r.out.stopped()) {
        why = FinishReason::Stop;
        d.stop_reason = r.out.matched();
        scheduler_->finish(o.seq);
      } else if (why == FinishReason::Length) {
        d.text += r.out.finish();
      }
    }
    if (why == FinishReason::None) {
      deliver(r, std::move(d));
    } else {
      end(r, why, {}, std::move(d));
      live_.erase(o.seq);
    }
  }
}

Engine::DeviceDraws Engine::plan_device_draws(const StepPlan& plan) {
  DeviceDraws d;
  for (const auto& s : plan.seqs) {
    if (!s.sample) continue;
    Live& r = *live_.at(s.seq);
    std::optional<kernels::RowSampling> p;
    if (s.num_drafts == 0 && !r.matcher && !logits_corrupt.armed()) p = r.sampler.device_params();
    if (p) p->n_valid = n_tokens_;
    d.logits_too |= !p;
    d.params.insert(d.params.end(), static_cast<size_t>(s.logits_rows()), p.value_or(kernels::RowSampling{}));
    d.drawn.insert(d.drawn.end(), static_cast<size_t>(s.logits_rows()), p.has_value());
  }
  return d;
}

void Engine::sample_seq(const ScheduledSeq& s, int row, const DeviceDraws* draws, std::vector<SampledToken>& sampled,
                        std::vector<SampleResult>& results) {
  const int vocab = model_->config().vocab;
  Live& r = *live_.at(s.seq);
  const auto v = scheduler_->view(s.seq);
  if (r.n_generated == 0) {
    prompt_total_.fetch_add(v.n_prompt);
    r.cached_tokens = v.cached_tokens;
  }
  auto sample_row = [&](int at, std::span<const int32_t> context, int32_t draft) {
    if (draws && draws->drawn[static_cast<size_t>(at)]) {
      results.push_back({draws->tokens[static_cast<size_t>(at)]});
      sampled.push_back({s.seq, results.back().token});
      return results.back().token;
    }
    std::span<float> logits(logits_.data() + static_cast<size_t>(at) * vocab, vocab);
    std::fill(logits.begin() + n_tokens_, logits.end(), -std::numeric_limits<float>::infinity());  // padding ids
    // Drafts never come with a grammar (take_inbox), so the matcher's state is this row's.
    // No token allowed: sampled unmasked; step() then ends the request with an error.
    // Fault point "grammar.off": while armed, no mask, as a broken one would let anything through.
    static const faults::FaultPoint grammar_off("grammar.off");
    if (r.matcher && !grammar_off.armed() && token_index_->allowed(*r.matcher, r.stop_tokens, r.allowed) > 0)
      grammar::mask_logits(r.allowed, logits);
    results.push_back(r.sampler.verify(logits, context, context.subspan(v.n_prompt), draft));
    sampled.push_back({s.seq, results.back().token});
    return results.back().token;
  };
  // A proposer reading features hears the one behind the sequence's newest token.
  auto observe = [&](int at, size_t n_tokens) {
    if (!proposer_ || !proposer_->reads_features()) return;
    const auto dim = static_cast<size_t>(model_->config().dim);
    proposer_->observe(s.seq, n_tokens, std::span<const float>(features_).subspan(static_cast<size_t>(at) * dim, dim));
  };
  if (s.num_drafts == 0) {
    sample_row(row, v.tokens, -1);
    observe(row, v.tokens.size() + 1);
    return;
  }
  // Row i is the target's distribution after the last token and the first i
  // drafts, penalties seeing those drafts as generated. Draft i is verified
  // against it (Sampler::verify: greedy, kept while it is the argmax; sampled,
  // kept with probability p(draft), else a token from the residual), and the
  // first token that is not the draft ends the step; after every draft, the
  // last row gives one more. Greedy output equals decoding one token a step;
  // sampled output has the same distribution.
  const auto drafts = std::span<const int32_t>(s.tokens).last(static_cast<size_t>(s.num_drafts));
  std::vector<int32_t> context(v.tokens.begin(), v.tokens.end());
  int accepted = 0;
  while (accepted < s.num_drafts && sample_row(row + accepted, context, drafts[accepted]) == drafts[accepted]) {
    spec_accepted_per_pos_[static_cast<size_t>(accepted)].fetch_add(1);
    context.push_back(drafts[accepted]);
    ++accepted;
  }
  if (accepted == s.num_drafts) sample_row(row + accepted, context, -1);  // every draft kept: the bonus token
  observe(row + accepted, context.size() + 1);
  spec_drafts_.fetch_add(1);
  spec_draft_tokens_.fetch_add(static_cast<uint64_t>(s.num_drafts));
  spec_accepted_.fetch_add(static_cast<uint64_t>(accepted));
}

void Engine::end(Live& r, FinishReason why, std::string error, Delta d) {
  // The scheduler no longer runs it: say so before its client can read the
  // gauges, which were published at the step's start.
  n_running_.store(static_cast<int>(scheduler_->num_running()));
  d.finish = why;
  d.error = std::move(error);
  d.usage = {static_cast<int>(r.req.prompt.size()), r.n_generated, r.cached_tokens};
  d.e2e_s = std::chrono::duration<double>(Clock::now() - r.arrival).count();
  deliver(r, std::move(d));
}

void Engine::deliver(Live& r, Delta&& d) {
  // A sink that throws loses its own request, never the step loop.
  try {
    r.req.sink(std::move(d));
  } catch (const std::exception& e) {
    spdlog::warn("request {}: sink failed: {}", r.req.id, e.what());
  }
}

}  // namespace inferd::engine
