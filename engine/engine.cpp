#include "engine/engine.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "engine/chat_template.hpp"
#include "faults/fault_points.hpp"
#include "engine/gguf_reader.hpp"
#include "engine/incremental_detokenizer.hpp"
#include "engine/kv_cache.hpp"
#include "engine/model_registry.hpp"
#include "kernels/shape_probe.hpp"
#include "engine/step_heartbeat.hpp"
#include "engine/stop_matcher.hpp"
#include "engine/tokenizer.hpp"

namespace inferd::engine {

using Clock = std::chrono::steady_clock;

const char* to_string(FinishReason r) {
  switch (r) {
    case FinishReason::None: return "none";
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Cancelled: return "cancelled";
    case FinishReason::Error: return "error";
  }
  return "?";
}

struct Sequence {
  GenerationRequest req;
  std::shared_ptr<RequestHandle> handle;
  std::vector<int32_t> tokens;  // prompt then generated
  int n_prompt = 0;
  int n_computed = 0;           // tokens whose K/V are in the cache
  int cached_tokens = 0;        // prompt tokens served by the prefix cache
  std::vector<int32_t> block_table;
  int n_hashed_blocks = 0;      // leading full blocks whose hash is registered
  uint64_t last_hash = 0;
  std::unique_ptr<Sampler> sampler;
  std::unique_ptr<IncrementalDetokenizer> detok;
  std::unique_ptr<StopMatcher> stops;
  Clock::time_point arrival = Clock::now();
  bool sent_first = false;
  bool preempted = false;
  bool done = false;

  int pending() const { return static_cast<int>(tokens.size()) - n_computed; }
  int n_generated() const { return static_cast<int>(tokens.size()) - n_prompt; }
};

namespace {

// Chains a block's tokens onto its predecessor's hash (splitmix-style mixing).
uint64_t block_hash(uint64_t prev, const int32_t* toks, int n) {
  uint64_t h = prev ^ 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < n; ++i) {
    h ^= static_cast<uint32_t>(toks[i]) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
  }
  return h == 0 ? 1 : h;
}

}  // namespace

Engine::Engine(const EngineOptions& opts, StepHeartbeat* heartbeat) : opts_(opts), heartbeat_(heartbeat) {
  backend_ = kernels::make_cpu_backend(opts_.threads);
  file_ = GgufFile::open(opts_.model_path);
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
  model_ = load_model(*file_, *backend_, precision_, progress);
  stage("tokenizer");
  tokenizer_ = Tokenizer::from_gguf(*file_);
  chat_ = std::make_unique<ChatTemplate>(ChatTemplate::from_gguf(*file_, *tokenizer_));
  const auto& mc = model_->config();
  max_model_len_ = opts_.max_model_len > 0 ? opts_.max_model_len : mc.max_context;

  KvGeometry g;
  g.n_layers = mc.n_layers;
  g.n_kv_heads = mc.n_kv_heads;
  g.head_dim = mc.head_dim;
  g.block_size = opts_.block_size;
  const size_t per_block = g.bytes_per_block_layer() * 2 * g.n_layers;
  const int min_blocks = (max_model_len_ + g.block_size - 1) / g.block_size + 1;
  g.num_blocks = opts_.num_kv_blocks > 0 ? opts_.num_kv_blocks
                                         : std::max<int>(min_blocks, static_cast<int>(opts_.kv_cache_bytes / per_block));
  if (g.num_blocks < min_blocks)
    throw std::invalid_argument("kv cache of " + std::to_string(g.num_blocks) + " blocks cannot hold one sequence of " +
                                std::to_string(max_model_len_) + " tokens");
  stage("kv_cache");
  kv_ = std::make_unique<KvCache>(g);
  blocks_ = std::make_unique<BlockAllocator>(g.num_blocks);
  spdlog::info("engine: {} ({} layers, dim {}, vocab {}), max_model_len {}, kv cache {} blocks x {} tokens ({:.0f} MiB), "
               "{} threads ({})",
               mc.name, mc.n_layers, mc.dim, mc.vocab, max_model_len_, g.num_blocks, g.block_size,
               g.total_bytes() / 1048576.0, backend_->threads(), backend_->name());
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() { stop(); }

ShapeAxes Engine::shape_axes() const {
  return engine::shape_axes(opts_.max_num_batched_tokens, opts_.max_num_seqs, max_model_len_);
}

std::vector<kernels::ShapeKey> Engine::reachable_shape_keys() const {
  kernels::ShapeRegistry probe;
  auto be = kernels::make_shape_probe(probe);
  auto model = load_model(*file_, *be, precision_);
  return probe_shape_space(*model, probe, kv_->geometry(), shape_axes());
}

void Engine::stop() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::unique_ptr<Sequence> Engine::make_sequence(GenerationRequest req) const {
  const int n = static_cast<int>(req.prompt.size());
  if (n == 0) throw InvalidRequest("prompt", "the prompt is empty");
  for (int32_t t : req.prompt)
    if (t < 0 || t >= model_->config().vocab)
      throw InvalidRequest("prompt", "token id " + std::to_string(t) + " is out of range");
  if (n >= max_model_len_)
    throw InvalidRequest("prompt", "the prompt has " + std::to_string(n) + " tokens; this model's maximum context length is " +
                                       std::to_string(max_model_len_) + " tokens");
  if (req.max_tokens < 1) throw InvalidRequest("max_tokens", "max_tokens must be at least 1");
  if (n + req.max_tokens > max_model_len_)
    throw InvalidRequest("max_tokens", "the prompt (" + std::to_string(n) + " tokens) plus max_tokens (" +
                                           std::to_string(req.max_tokens) + ") exceeds the maximum context length of " +
                                           std::to_string(max_model_len_) + " tokens");
  auto s = std::make_unique<Sequence>();
  s->handle = std::make_shared<RequestHandle>();
  s->tokens = req.prompt;
  s->n_prompt = n;
  s->sampler = std::make_unique<Sampler>(req.sampling);
  s->detok = std::make_unique<IncrementalDetokenizer>(*tokenizer_, req.skip_special_tokens);
  s->stops = std::make_unique<StopMatcher>(req.stop);
  s->req = std::move(req);
  return s;
}

std::shared_ptr<RequestHandle> Engine::submit(GenerationRequest req) {
  std::vector<std::unique_ptr<Sequence>> one;
  one.push_back(make_sequence(std::move(req)));
  auto handle = one.front()->handle;
  enqueue(std::move(one), true);
  return handle;
}

std::vector<std::shared_ptr<RequestHandle>> Engine::submit_together(std::vector<GenerationRequest> reqs) {
  std::vector<std::unique_ptr<Sequence>> seqs;
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (auto& r : reqs) {
    seqs.push_back(make_sequence(std::move(r)));
    handles.push_back(seqs.back()->handle);
  }
  enqueue(std::move(seqs), false);
  return handles;
}

void Engine::enqueue(std::vector<std::unique_ptr<Sequence>> seqs, bool queue_limit) {
  {
    std::lock_guard lk(mu_);
    if (stopping_) throw QueueFull("the engine is stopping");
    // n_waiting_ counts the inbox too: submit adds to it, each step recounts both under this lock.
    if (queue_limit && static_cast<size_t>(n_waiting_.load()) + seqs.size() > opts_.max_waiting)
      throw QueueFull("too many queued requests (" + std::to_string(opts_.max_waiting) + ")");
    for (auto& s : seqs) inbox_.push_back(std::move(s));
    n_waiting_.fetch_add(static_cast<int>(seqs.size()));
  }
  cv_.notify_one();
}

EngineStats Engine::stats() const {
  EngineStats st;
  st.running = n_running_.load();
  st.waiting = n_waiting_.load();
  st.kv_blocks_total = blocks_ ? blocks_->num_blocks() : 0;
  st.kv_blocks_used = kv_used_.load();
  st.prompt_tokens_total = prompt_total_.load();
  st.generation_tokens_total = gen_total_.load();
  st.prefix_queries_tokens = prefix_q_.load();
  st.prefix_hits_tokens = prefix_hit_.load();
  st.preemptions_total = preempt_total_.load();
  st.steps_total = steps_total_.load();
  return st;
}

void Engine::loop() {
  for (;;) {
    {
      std::unique_lock lk(mu_);
      if (heartbeat_ && inbox_.empty() && running_.empty() && waiting_.empty()) heartbeat_->set_idle();
      cv_.wait(lk, [&] {
        return stopping_ || reset_reason_ || !inbox_.empty() || !running_.empty() || !waiting_.empty();
      });
      if (reset_reason_) {
        do_reset(*reset_reason_);
        reset_reason_.reset();
        abort_step_ = false;
        ++resets_done_;
        reset_cv_.notify_all();
      }
      while (!inbox_.empty()) {
        if (inbox_.front()->req.priority) waiting_.push_front(std::move(inbox_.front()));
        else waiting_.push_back(std::move(inbox_.front()));
        inbox_.pop_front();
      }
      if (stopping_) break;
    }
    try {
      if (build_step()) run_step();
    } catch (const std::exception& e) {
      // A failing step must not take the process down: fail what was in it.
      spdlog::error("engine step failed: {}", e.what());
      for (auto& s : running_) finish(*s, FinishReason::Error, std::string("engine step failed: ") + e.what());
    }
    std::erase_if(running_, [](const auto& s) { return s->done; });
    n_running_.store(static_cast<int>(running_.size()));
    {
      std::lock_guard lk(mu_);
      n_waiting_.store(static_cast<int>(waiting_.size() + inbox_.size()));
    }
    kv_used_.store(blocks_->num_used());
  }
  for (auto& s : running_) finish(*s, FinishReason::Error, "the engine stopped");
  for (auto& s : waiting_) finish(*s, FinishReason::Error, "the engine stopped");
  running_.clear();
  waiting_.clear();
  n_running_.store(0);
  n_waiting_.store(0);
}

bool Engine::reset(const std::string& reason, std::chrono::milliseconds timeout) {
  std::unique_lock lk(mu_);
  const uint64_t target = resets_done_ + 1;
  reset_reason_ = reason;
  abort_step_ = true;
  cv_.notify_all();
  return reset_cv_.wait_for(lk, timeout, [&] { return resets_done_ >= target || stopping_; }) && !stopping_;
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

void Engine::do_reset(const std::string& reason) {
  int held = 0, ended = 0;
  auto sort = [&](std::unique_ptr<Sequence>& s) {
    if (s->done) return;
    if (s->n_generated() == 0) {
      release_blocks(*s);
      s->n_computed = 0;
      s->preempted = false;
      held_.push_back(std::move(s));
      ++held;
    } else {
      finish(*s, FinishReason::Error, "interrupted by a recovery (" + reason + ") after it had produced output");
      ++ended;
    }
  };
  for (auto& s : running_) sort(s);
  for (auto& s : waiting_) sort(s);
  for (auto& s : inbox_) sort(s);
  running_.clear();
  waiting_.clear();
  inbox_.clear();
  // Whatever the cache holds may be what went wrong: nothing of it is reused.
  blocks_->clear_cache();
  n_running_.store(0);
  n_waiting_.store(0);
  kv_used_.store(blocks_->num_used());
  spdlog::warn("engine reset ({}): {} requests held to run again, {} ended with an error", reason, held, ended);
}

bool Engine::ensure_blocks(Sequence& s, int upto_tokens) {
  const int need = (upto_tokens + opts_.block_size - 1) / opts_.block_size;
  while (static_cast<int>(s.block_table.size()) < need) {
    auto b = blocks_->allocate();
    if (!b) return false;
    s.block_table.push_back(*b);
  }
  return true;
}

void Engine::release_blocks(Sequence& s) {
  for (int32_t b : s.block_table) blocks_->release(b);
  s.block_table.clear();
  s.n_hashed_blocks = 0;
  s.last_hash = 0;
}

int Engine::reuse_cached_prefix(Sequence& s) {
  if (!opts_.enable_prefix_caching || s.n_computed != 0) return 0;
  const int bs = opts_.block_size;
  // At least one token is always computed: its logits start the generation.
  const int full = (static_cast<int>(s.tokens.size()) - 1) / bs;
  uint64_t h = 0;
  int hit = 0;
  for (int i = 0; i < full; ++i) {
    h = block_hash(h, s.tokens.data() + i * bs, bs);
    auto b = blocks_->lookup(h);
    if (!b) break;
    s.block_table.push_back(*b);
    s.last_hash = h;
    ++hit;
  }
  s.n_hashed_blocks = hit;
  s.n_computed = hit * bs;
  return hit * bs;
}

void Engine::register_full_blocks(Sequence& s) {
  if (!opts_.enable_prefix_caching) return;
  const int bs = opts_.block_size;
  while ((s.n_hashed_blocks + 1) * bs <= s.n_computed) {
    const int i = s.n_hashed_blocks;
    s.last_hash = block_hash(s.last_hash, s.tokens.data() + i * bs, bs);
    blocks_->register_hash(s.block_table[i], s.last_hash);
    ++s.n_hashed_blocks;
  }
}

bool Engine::build_step() {
  batch_.clear();
  batch_logit_seqs_.clear();
  batch_seqs_.clear();
  batch_decodes_ = 0;
  const auto now = Clock::now();
  auto expired = [&](const Sequence& s) {
    return s.handle->cancelled() || (s.req.deadline && now > *s.req.deadline);
  };
  auto drop_expired = [&](auto& seqs) {
    for (auto& s : seqs)
      if (expired(*s)) finish(*s, FinishReason::Cancelled);
    std::erase_if(seqs, [](const auto& s) { return s->done; });
  };
  drop_expired(running_);
  drop_expired(waiting_);

  int budget = opts_.max_num_batched_tokens;
  std::vector<Sequence*> scheduled;
  auto is_scheduled = [&](Sequence* s) { return std::find(scheduled.begin(), scheduled.end(), s) != scheduled.end(); };

  // Makes room for s by preempting the newest running sequence not in this step.
  auto make_room = [&](Sequence* s, int upto) {
    while (!ensure_blocks(*s, upto)) {
      Sequence* victim = nullptr;
      for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
        Sequence* c = it->get();
        if (c != s && !c->preempted && !c->done && !is_scheduled(c)) {
          victim = c;
          break;
        }
      }
      if (!victim) return false;
      // Recompute preemption: its K/V are dropped and rebuilt when it is readmitted.
      release_blocks(*victim);
      victim->n_computed = 0;
      victim->preempted = true;
      preempt_total_.fetch_add(1);
    }
    return true;
  };

  auto schedule = [&](Sequence* s, int n) {
    const int start = s->n_computed;
    for (int i = 0; i < n; ++i) {
      const bool last = start + i + 1 == static_cast<int>(s->tokens.size());
      batch_.add(s->tokens[start + i], start + i, s->block_table.data(), last);
      if (last) batch_logit_seqs_.push_back(s);
    }
    scheduled.push_back(s);
    batch_seqs_.emplace_back(s, n);
    budget -= n;
  };

  // Decode tokens first, then prefill chunks of sequences already running.
  for (int pass = 0; pass < 2; ++pass) {
    for (auto& up : running_) {
      Sequence* s = up.get();
      if (s->preempted || budget <= 0) continue;
      const bool decode = s->pending() == 1;
      if ((pass == 0) != decode) continue;
      const int n = std::min(s->pending(), budget);
      if (make_room(s, s->n_computed + n)) {
        schedule(s, n);
        batch_decodes_ += decode;
      }
    }
  }
  // Preempted sequences go back to the front of the queue, oldest first.
  for (auto it = running_.rbegin(); it != running_.rend(); ++it)
    if ((*it)->preempted) {
      (*it)->preempted = false;
      waiting_.push_front(std::move(*it));
    }
  std::erase_if(running_, [](const auto& s) { return !s; });

  // Admit waiting sequences while there is room.
  while (!waiting_.empty() && budget > 0 && static_cast<int>(running_.size()) < opts_.max_num_seqs) {
    Sequence* s = waiting_.front().get();
    const int hit = reuse_cached_prefix(*s);
    if (s->cached_tokens == 0 && s->n_generated() == 0) {
      s->cached_tokens = hit;
      prefix_q_.fetch_add(s->tokens.size());
      prefix_hit_.fetch_add(hit);
    }
    const int n = std::min(s->pending(), budget);
    if (!ensure_blocks(*s, s->n_computed + n)) {
      release_blocks(*s);  // also drops prefix blocks it took; retried next step
      s->n_computed = 0;
      break;
    }
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    schedule(s, n);
  }
  return batch_.size() > 0;
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
// the bottom, as a corrupted weight or KV block would skew it.
void Engine::corrupt_if_armed() {
  static const faults::FaultPoint corrupt("logits.corrupt");
  if (!corrupt.armed()) return;
  const size_t vocab = static_cast<size_t>(model_->config().vocab);
  for (size_t r = 0; r * vocab < logits_.size(); ++r) {
    float* row = logits_.data() + r * vocab;
    *std::max_element(row, row + vocab) = -1e30f;
  }
}

void Engine::run_step() {
  const int vocab = model_->config().vocab;
  logits_.resize(batch_.logits_rows.size() * static_cast<size_t>(vocab));
  if (heartbeat_) heartbeat_->begin_step();
  stall_if_armed();
  {
    // A step that only decodes is what a captured decode graph would replay.
    std::optional<kernels::LaunchScope> decode_step;
    if (batch_decodes_ == static_cast<int>(batch_.size())) decode_step.emplace(decode_batch_key(batch_decodes_));
    model_->forward(batch_, *kv_, logits_.data());
  }
  corrupt_if_armed();
  if (heartbeat_) heartbeat_->end_step();
  // A reset cut this step short: its results are suspect and nothing is sampled
  // from them, so a request that had produced nothing still has produced nothing.
  if (abort_step_.load()) return;
  steps_total_.fetch_add(1);

  // Every scheduled token is now in the cache.
  for (auto [s, n] : batch_seqs_) {
    s->n_computed += n;
    register_full_blocks(*s);
  }

  const auto now = Clock::now();
  for (size_t r = 0; r < batch_logit_seqs_.size(); ++r) {
    Sequence& s = *batch_logit_seqs_[r];
    if (s.n_generated() == 0) prompt_total_.fetch_add(s.n_prompt);
    std::span<float> row(logits_.data() + r * vocab, vocab);
    const std::span<const int32_t> all(s.tokens);
    const std::span<const int32_t> gen = all.subspan(s.n_prompt);
    SampleResult res = s.sampler->sample(row, all, gen);
    s.tokens.push_back(res.token);
    gen_total_.fetch_add(1);

    Delta d;
    TokenOut t{res.token, res.logprob, {}};
    if (s.req.sampling.logprobs >= 0) t.top = std::move(res.top);
    d.tokens.push_back(std::move(t));
    if (!s.sent_first) {
      d.ttft_s = std::chrono::duration<double>(now - s.arrival).count();
      s.sent_first = true;
    }

    auto in = [](const std::vector<int32_t>& v, int32_t t) { return std::find(v.begin(), v.end(), t) != v.end(); };
    const bool eos = !s.req.ignore_eos && (in(tokenizer_->stop_ids(), res.token) || in(s.req.stop_token_ids, res.token));
    FinishReason why = FinishReason::None;
    if (eos) {
      why = FinishReason::Stop;
    } else {
      d.text = s.stops->push(s.detok->push(res.token));
      if (s.stops->stopped()) {
        why = FinishReason::Stop;
        d.stop_reason = s.stops->matched();
      } else if (s.n_generated() >= s.req.max_tokens || static_cast<int>(s.tokens.size()) >= max_model_len_) {
        why = FinishReason::Length;
      }
    }
    if (why == FinishReason::None) {
      deliver(s, std::move(d));
    } else {
      if (why == FinishReason::Length || eos) d.text += s.stops->push(s.detok->finish()) + s.stops->flush();
      finish(s, why, {}, std::move(d));
    }
  }
}

void Engine::finish(Sequence& s, FinishReason why, std::string error, Delta d) {
  if (s.done) return;
  d.finish = why;
  d.error = std::move(error);
  d.usage = {s.n_prompt, std::max(0, s.n_generated()), s.cached_tokens};
  d.e2e_s = std::chrono::duration<double>(Clock::now() - s.arrival).count();
  release_blocks(s);
  s.done = true;
  deliver(s, std::move(d));
}

void Engine::deliver(Sequence& s, Delta&& d) {
  // A sink that throws loses its own request, never the scheduler.
  try {
    s.req.sink(std::move(d));
  } catch (const std::exception& e) {
    spdlog::warn("request {}: sink failed: {}", s.req.id, e.what());
  }
}

}  // namespace inferd::engine
