#include "engine/spec/draft_model_proposer.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

#include "engine/engine.hpp"
#include "engine/gguf_reader.hpp"
#include "engine/hf_checkpoint.hpp"
#include "engine/models/model_registry.hpp"
#include "engine/tokenizer.hpp"

namespace inferd::engine {
namespace {

// The sequence id the warm-up's forwards hold their blocks under: no
// scheduler sequence has it.
constexpr uint64_t kWarmSeq = std::numeric_limits<uint64_t>::max();

std::string draft_error(const std::string& path, const std::string& what) {
  return "speculative draft model " + path + ": " + what;
}

}  // namespace

DraftModelProposer::DraftModelProposer(const DraftModelOptions& opts, kernels::Backend& backend,
                                       const Tokenizer& target, const DraftLimits& limits)
    : opts_(opts), limits_(limits), backend_(backend) {
  if (opts_.num_speculative_tokens < 1)
    throw std::invalid_argument("num_speculative_tokens must be at least 1");
  file_ = open_model(opts_.model_path);
  model_ = load_model(*file_, backend_, limits_.precision);
  const ModelConfig& mc = model_->config();
  // Drafts are verified as token ids: the draft must name every id as the target does.
  const auto mine = Tokenizer::from_gguf(*file_);
  n_tokens_ = static_cast<int>(target.vocab_size());
  if (mine->vocab_size() != target.vocab_size())
    throw std::invalid_argument(draft_error(opts_.model_path, "its tokenizer has " + std::to_string(mine->vocab_size()) +
                                                                  " tokens, the target's " +
                                                                  std::to_string(target.vocab_size()) +
                                                                  ": a draft needs the target's vocabulary"));
  for (int32_t id = 0; id < n_tokens_; ++id)
    if (mine->token_text(id) != target.token_text(id))
      throw std::invalid_argument(draft_error(
          opts_.model_path, "token " + std::to_string(id) + " is '" + mine->token_text(id) + "', the target's is '" +
                                target.token_text(id) + "': a draft needs the target's vocabulary"));
  if (mc.vocab < n_tokens_)
    throw std::invalid_argument(draft_error(opts_.model_path, "its output has " + std::to_string(mc.vocab) +
                                                                  " rows for " + std::to_string(n_tokens_) + " tokens"));
  if (mc.max_context < limits_.max_model_len)
    throw std::invalid_argument(draft_error(
        opts_.model_path, "its trained context is " + std::to_string(mc.max_context) + " tokens, less than max_model_len " +
                              std::to_string(limits_.max_model_len)));
  if (model_->holds_sequence_state())
    throw std::invalid_argument(draft_error(opts_.model_path, mc.architecture +
                                                                  " keeps each sequence's state itself and cannot roll "
                                                                  "back rejected drafts"));
  EngineOptions sizing;
  sizing.block_size = limits_.block_size;
  sizing.kv_cache_bytes = limits_.kv_cache_bytes;
  KvGeometry g;
  try {
    g = plan_kv_cache(mc, limits_.max_model_len, sizing);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(draft_error(opts_.model_path, std::string("its ") + e.what()));
  }
  kv_ = std::make_unique<KvCache>(g, backend_);
  blocks_ = std::make_unique<KvCacheManager>(g.num_blocks, g.block_size, /*enable_prefix_caching=*/false);
  spdlog::info("engine: speculative draft model {} ({} layers, dim {}), kv cache {} blocks x {} tokens ({:.0f} MiB), "
               "{} drafts a step at most",
               mc.name, mc.n_layers, mc.dim, g.num_blocks, g.block_size, g.total_bytes() / 1048576.0,
               opts_.num_speculative_tokens);
}

DraftModelProposer::~DraftModelProposer() = default;

void DraftModelProposer::propose(std::span<const DraftRequest> reqs, std::vector<std::vector<int32_t>>& drafts) {
  drafts.assign(reqs.size(), {});
  // Drafts are only guesses: forwards that fail (a reset cancelled them, the
  // device ran out of memory) cost this step its drafts, never its tokens.
  try {
    draft(reqs, drafts);
  } catch (const std::exception& e) {
    for (size_t i = 0; i < reqs.size(); ++i) {
      drafts[i].clear();
      release(reqs[i].seq);  // what its cache holds is unknown now
    }
    spdlog::warn("speculative draft model: no drafts this step: {}", e.what());
  }
}

// All sequences draft together: their new tokens in one forward (a prompt in
// chunks no wider than the target's steps), then one forward per draft
// position with a row for each sequence still drafting.
void DraftModelProposer::draft(std::span<const DraftRequest> reqs, std::vector<std::vector<int32_t>>& drafts) {
  struct Job {
    size_t req;
    int k;    // drafts wanted
    int fed;  // positions the cache holds for it
  };
  std::vector<Job> jobs;
  std::vector<uint64_t> drafting;  // sequences of this call: never evicted by it
  for (size_t i = 0; i < reqs.size(); ++i) {
    const int k = std::min(reqs[i].max_drafts, opts_.num_speculative_tokens);
    const auto n = static_cast<int>(reqs[i].tokens.size());
    if (k <= 0 || n == 0) continue;
    Fed& f = fed_[reqs[i].seq];
    f.last_use = ++clock_;
    // Everything from the first position where the sequence left what was fed
    // (a rejected draft) is fed again; the last token at least, for its logits.
    const auto tokens = reqs[i].tokens;
    const int keep = std::min(
        static_cast<int>(std::mismatch(f.tokens.begin(), f.tokens.end(), tokens.begin(), tokens.end()).first -
                         f.tokens.begin()),
        n - 1);
    f.tokens.resize(static_cast<size_t>(keep));
    drafting.push_back(reqs[i].seq);
    // The drafts after the first are fed too, the last one is not.
    if (!make_room(reqs[i].seq, n + k - 1, drafting)) {
      drafting.pop_back();
      release(reqs[i].seq);
      continue;
    }
    jobs.push_back({i, k, keep});
  }
  const auto width = static_cast<size_t>(std::max(1, limits_.max_num_batched_tokens));
  std::vector<size_t> rows;  // the job each logits row of the batch answers
  auto run = [&] {
    const auto tokens = forward_argmax(batch_);
    for (size_t r = 0; r < rows.size(); ++r) drafts[jobs[rows[r]].req].push_back(tokens[r]);
    batch_.clear();
    rows.clear();
  };
  // New tokens.
  batch_.clear();
  for (size_t j = 0; j < jobs.size(); ++j) {
    Job& job = jobs[j];
    const DraftRequest& r = reqs[job.req];
    const auto n = static_cast<int>(r.tokens.size());
    while (job.fed < n) {
      if (batch_.size() == width) run();
      const int len = std::min(n - job.fed, static_cast<int>(width - batch_.size()));
      const int32_t at = batch_.add_table(blocks_->block_table(r.seq));
      for (int p = job.fed; p < job.fed + len; ++p) batch_.add(r.tokens[static_cast<size_t>(p)], p, at, p + 1 == n, r.seq);
      job.fed += len;
      if (job.fed == n) rows.push_back(j);
    }
    fed_[r.seq].tokens.assign(r.tokens.begin(), r.tokens.end());
  }
  if (batch_.size() > 0) run();
  // One more draft a forward, for every sequence that wants it.
  for (bool more = true; more;) {
    more = false;
    for (size_t j = 0; j < jobs.size(); ++j) {
      const DraftRequest& r = reqs[jobs[j].req];
      std::vector<int32_t>& mine = drafts[jobs[j].req];
      if (static_cast<int>(mine.size()) >= jobs[j].k) continue;
      Fed& f = fed_[r.seq];
      batch_.add(mine.back(), static_cast<int32_t>(f.tokens.size()), batch_.add_table(blocks_->block_table(r.seq)),
                 true, r.seq);
      f.tokens.push_back(mine.back());
      rows.push_back(j);
      more = true;
    }
    if (more) run();
  }
}

// Blocks for `positions` of the sequence, taken from the sequence drafted for
// longest ago (never one of `drafting`) while the cache is full. False when
// even that is not enough.
bool DraftModelProposer::make_room(uint64_t seq, int positions, const std::vector<uint64_t>& drafting) {
  blocks_->trim(seq, static_cast<int>(fed_[seq].tokens.size()));
  while (!blocks_->allocate_slots(seq, positions)) {
    auto oldest = fed_.end();
    for (auto it = fed_.begin(); it != fed_.end(); ++it)
      if (std::find(drafting.begin(), drafting.end(), it->first) == drafting.end() &&
          (oldest == fed_.end() || it->second.last_use < oldest->second.last_use))
        oldest = it;
    if (oldest == fed_.end()) return false;
    blocks_->free(oldest->first);
    fed_.erase(oldest);
  }
  return true;
}

// Runs `batch`; each logits row's argmax over the ids the tokenizer knows.
std::vector<int32_t> DraftModelProposer::forward_argmax(const StepBatch& batch) {
  const auto vocab = static_cast<size_t>(model_->config().vocab);
  logits_.resize(batch.logits_rows.size() * vocab);
  if (on_forward_) {
    // Each run of tokens on one block table is a sequence's: its tokens times the context they reach.
    uint64_t work = 0;
    for (size_t i = 0, j = 0; i < batch.size(); i = j) {
      for (j = i; j < batch.size() && batch.table_of[j] == batch.table_of[i]; ++j) {}
      work += (j - i) * (static_cast<uint64_t>(batch.positions[j - 1]) + 1);
    }
    on_forward_(work);
  }
  model_->forward(batch, *kv_, logits_.data());
  std::vector<int32_t> out(batch.logits_rows.size());
  for (size_t r = 0; r < out.size(); ++r) {
    const float* row = logits_.data() + r * vocab;
    out[r] = static_cast<int32_t>(std::max_element(row, row + n_tokens_) - row);
  }
  return out;
}

void DraftModelProposer::release(uint64_t seq) {
  fed_.erase(seq);
  blocks_->free(seq);
}

void DraftModelProposer::clear() {
  for (const auto& [seq, f] : fed_) blocks_->free(seq);
  fed_.clear();
}

// The draft's forwards carry up to the target's step width of tokens, sample a
// row for each sequence drafting and read contexts up to max_model_len, but are
// never captured decode steps.
ShapeAxes DraftModelProposer::draft_axes(const ShapeAxes& target) {
  ShapeAxes a;
  a.step_tokens = target.step_tokens;
  a.sampled_seqs = target.sampled_seqs;
  a.contexts = target.contexts;
  return a;
}

std::vector<kernels::ShapeKey> DraftModelProposer::reachable_shape_keys(const ShapeAxes& target) const {
  return engine::reachable_shape_keys(*file_, limits_.precision, TensorParallel{}, kv_->geometry(), draft_axes(target));
}

void DraftModelProposer::warm(const ShapeAxes& target) {
  clear();
  const ShapeAxes axes = draft_axes(target);
  const int64_t max_ctx = axes.contexts.empty() ? 1 : axes.contexts.back();
  if (!blocks_->allocate_slots(kWarmSeq, static_cast<int>(max_ctx)))
    throw std::runtime_error("speculative draft model: its cache cannot hold a sequence of " + std::to_string(max_ctx) +
                             " tokens to warm up");
  const std::vector<int32_t> table = blocks_->block_table(kWarmSeq);
  for_each_axis_step(axes, table, [&](const StepBatch& b) { forward_argmax(b); });
  blocks_->free(kWarmSeq);
}

}  // namespace inferd::engine
