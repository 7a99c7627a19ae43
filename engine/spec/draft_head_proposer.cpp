#include "engine/spec/draft_head_proposer.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/crc.hpp>
#include <cstring>
#include <stdexcept>

#include "engine/gguf_reader.hpp"
#include "kernels/shape_tracer.hpp"

namespace inferd::engine {

uint32_t draft_head_fingerprint(const GgufFile& target) {
  const auto& t = target.tensor("token_embd.weight");
  boost::crc_32_type c;
  c.process_bytes(t.data, t.nbytes);
  return c.checksum();
}

DraftHeadProposer::DraftHeadProposer(const DraftHeadOptions& opts, kernels::Backend& backend, const Model& target,
                                     const GgufFile& target_file)
    : opts_(opts), backend_(backend), shared_(target.shared_head()) {
  const std::string what = "speculative draft head " + opts.path + ": ";
  if (!backend.host_visible())
    throw std::invalid_argument(what + "a draft head runs on the CPU backend only, not on " + backend.name());
  if (!target.emits_features() || shared_.output.data == nullptr)
    throw std::invalid_argument(what + "the " + target.config().architecture + " model does not give its features");
  file_ = GgufFile::open(opts.path);
  if (file_->get_string("general.architecture").value_or("") != "draft_head")
    throw std::invalid_argument(what + "general.architecture is '" +
                                file_->get_string("general.architecture").value_or("") +
                                "', not 'draft_head' (tools/train_draft_head.py writes one)");
  dim_ = target.config().dim;
  vocab_ = target.config().vocab;
  const auto dim = file_->get_int("draft_head.dim").value_or(0), vocab = file_->get_int("draft_head.vocab").value_or(0);
  if (dim != dim_ || vocab != vocab_)
    throw std::invalid_argument(what + "it is for a model of width " + std::to_string(dim) + " and vocabulary " +
                                std::to_string(vocab) + "; the target has " + std::to_string(dim_) + " and " +
                                std::to_string(vocab_));
  // The head learned one model's features: another model's, even of the same
  // shape, would give drafts that are never accepted.
  const auto want = file_->get_int("draft_head.embedding_crc32");
  const uint32_t have = draft_head_fingerprint(target_file);
  if (!want || static_cast<uint32_t>(*want) != have)
    throw std::invalid_argument(what + "it was trained for another model (draft_head.embedding_crc32 " +
                                std::to_string(want.value_or(-1)) + ", the target's token_embd.weight has " +
                                std::to_string(have) + ")");
  auto f32 = [&](const char* name, std::initializer_list<int64_t> dims, bool or_f16 = false) -> const GgufTensorInfo& {
    const auto& t = file_->tensor(name, dims);
    if (t.type != kernels::DType::F32 && !(or_f16 && t.type == kernels::DType::F16))
      throw LoadError(file_->path(), t.info_offset,
                      std::string("tensor ") + name + (or_f16 ? " must be F32 or F16" : " must be F32"));
    return t;
  };
  ffn_dim_ = static_cast<int>(file_->get_int("draft_head.ffn_dim").value_or(0));
  if (ffn_dim_ <= 0) throw LoadError(file_->path(), 0, "draft_head.ffn_dim is missing or not positive");
  auto matrix = [&](const char* name, int64_t rows, int64_t cols) {
    const auto& t = f32(name, {cols, rows}, true);
    return kernels::WeightView{t.type, t.data, rows, cols, kernels::row_bytes(t.type, cols)};
  };
  w_feature_ = matrix("draft_head.fc_feature.weight", dim_, dim_);
  w_token_ = matrix("draft_head.fc_token.weight", dim_, dim_);
  w_gate_ = matrix("draft_head.ffn_gate.weight", ffn_dim_, dim_);
  w_up_ = matrix("draft_head.ffn_up.weight", ffn_dim_, dim_);
  w_down_ = matrix("draft_head.ffn_down.weight", dim_, ffn_dim_);
  bias_ = static_cast<const float*>(f32("draft_head.fc.bias", {dim_}).data);
  if (opts_.n_tokens <= 0 || opts_.n_tokens > vocab_) opts_.n_tokens = vocab_;
  if (opts_.lookup) lookup_.emplace(*opts_.lookup);

  // The ids it drafts: their rows of the target's output head, copied
  // together, are all a draft scores (far fewer than the vocabulary's).
  const auto ids = file_->get_int_array("draft_head.draft_ids");
  if (ids.empty()) throw LoadError(file_->path(), 0, "draft_head.draft_ids (the ids the head drafts) is missing or empty");
  const auto& out = shared_.output;
  out_rows_.resize(ids.size() * out.row_stride);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= opts_.n_tokens)
      throw std::invalid_argument(what + "draft_head.draft_ids names id " + std::to_string(ids[i]) +
                                  ", which the target's tokenizer does not have");
    draft_ids_.push_back(static_cast<int32_t>(ids[i]));
    std::memcpy(out_rows_.data() + i * out.row_stride, static_cast<const uint8_t*>(out.data) + ids[i] * out.row_stride,
                out.row_stride);
  }
  draft_output_ = {out.type, out_rows_.data(), static_cast<int64_t>(ids.size()), out.cols, out.row_stride};
  spdlog::info("engine: speculative draft head {} (width {}, feed-forward {}, {} draft ids), a draft counted as {:.2f} "
               "of a decode step", opts_.path, dim_, ffn_dim_, draft_ids_.size(), draft_cost());
}

DraftHeadProposer::~DraftHeadProposer() = default;

void DraftHeadProposer::observe(uint64_t seq, size_t n_tokens, std::span<const float> feature) {
  auto& s = features_[seq];
  if (s.drafted > 0 && n_tokens > s.n_tokens) {  // the last proposal's fate: drafts kept, then one token
    const auto kept = static_cast<int>(std::min(n_tokens - s.n_tokens - 1, static_cast<size_t>(s.drafted)));
    s.rates[s.source].record(s.drafted, kept, DraftPace::kFade);
  }
  s.drafted = 0;
  s.n_tokens = n_tokens;
  s.f.assign(feature.begin(), feature.end());
}

void DraftHeadProposer::step(kernels::Backend& be, int64_t n, float* f, int32_t* tokens, Scratch& s) const {
  const int64_t D = dim_;
  s.x.resize(static_cast<size_t>(n * D));
  const int64_t V = draft_output_.rows;
  s.logits.resize(static_cast<size_t>(n * std::max<int64_t>(V, D)));
  be.get_rows(shared_.embedding, tokens, n, s.x.data());
  if (shared_.embed_scale != 1.0f) be.scale(s.x.data(), shared_.embed_scale, n * D);
  // f <- W_f f + W_x x + b, with the product of W_x in the logits' room (free until the head runs).
  float* fx = s.logits.data();
  be.matmul(w_token_, s.x.data(), n, fx);
  std::copy_n(f, n * D, s.x.data());
  be.matmul(w_feature_, s.x.data(), n, f);
  be.add(f, fx, n * D);
  be.add_rows(f, bias_, n, D);
  // f <- f + W_down (silu(W_gate f) * W_up f)
  s.gate.resize(static_cast<size_t>(n * ffn_dim_));
  s.up.resize(static_cast<size_t>(n * ffn_dim_));
  be.matmul_silu_mul({w_gate_, s.gate.data()}, {w_up_, s.up.data()}, f, n);
  be.matmul(w_down_, s.gate.data(), n, fx);
  be.add(f, fx, n * D);
  be.matmul(draft_output_, f, n, s.logits.data());
  for (int64_t r = 0; r < n; ++r) {
    const float* row = s.logits.data() + r * V;
    tokens[r] = draft_ids_[static_cast<size_t>(std::max_element(row, row + V) - row)];
  }
}

void DraftHeadProposer::propose(std::span<const DraftRequest> reqs, std::vector<std::vector<int32_t>>& drafts) {
  drafts.assign(reqs.size(), {});
  // The sequences whose feature is their newest (observed at their present
  // length), unless prompt lookup drafts for them and has fared at least as well.
  std::vector<size_t> rows;
  std::vector<const Feature*> held;  // rows' features
  for (size_t i = 0; i < reqs.size(); ++i) {
    const auto it = features_.find(reqs[i].seq);
    if (reqs[i].max_drafts <= 0 || it == features_.end() || it->second.n_tokens != reqs[i].tokens.size()) continue;
    Feature& s = it->second;
    const int k = std::min(reqs[i].max_drafts, opts_.num_speculative_tokens);
    if (lookup_ && s.rates[kLookup].value() >= s.rates[kHead].value()) {
      drafts[i] = lookup_->lookup(reqs[i].tokens, k);
      if (!drafts[i].empty()) {
        s.source = kLookup;
        s.drafted = static_cast<int>(drafts[i].size());
        continue;
      }
    }
    s.source = kHead;
    s.drafted = k;
    rows.push_back(i);
    held.push_back(&s);
  }
  if (rows.empty()) return;
  const auto D = static_cast<size_t>(dim_);
  auto& f_ = scratch_.f;
  f_.resize(rows.size() * D);
  std::vector<int32_t> tokens(rows.size());
  int most = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    std::copy(held[r]->f.begin(), held[r]->f.end(), f_.begin() + static_cast<ptrdiff_t>(r * D));
    tokens[r] = reqs[rows[r]].tokens.back();
    most = std::max(most, held[r]->drafted);
  }
  // Every step drafts for all rows; a row takes only as many as it asked for.
  for (int d = 0; d < most; ++d) {
    step(backend_, static_cast<int64_t>(rows.size()), f_.data(), tokens.data(), scratch_);
    for (size_t r = 0; r < rows.size(); ++r)
      if (d < held[r]->drafted) drafts[rows[r]].push_back(tokens[r]);
  }
}

void DraftHeadProposer::run_axes(kernels::Backend& be, const ShapeAxes& target, Scratch& s) const {
  for (int64_t n : target.sampled_seqs) {
    s.f.assign(static_cast<size_t>(n * dim_), 0.0f);
    std::vector<int32_t> tokens(static_cast<size_t>(n), 0);
    step(be, n, s.f.data(), tokens.data(), s);
  }
}

std::vector<kernels::ShapeKey> DraftHeadProposer::reachable_shape_keys(const ShapeAxes& target) const {
  kernels::ShapeRegistry traced;
  auto tracer = kernels::make_shape_tracer(traced);
  Scratch s;
  run_axes(*tracer, target, s);
  std::vector<kernels::ShapeKey> keys;
  for (auto& [key, use] : traced.snapshot()) keys.push_back(key);
  return keys;
}

double DraftHeadProposer::draft_cost() const {
  if (opts_.target_weight_bytes == 0) return DraftPace::kDraftCost;
  size_t bytes = static_cast<size_t>(draft_output_.rows) * draft_output_.row_stride;
  for (const auto* w : {&w_feature_, &w_token_, &w_gate_, &w_up_, &w_down_})
    bytes += static_cast<size_t>(w->rows) * w->row_stride;
  return DraftPace::kDraftCost + static_cast<double>(bytes) / static_cast<double>(opts_.target_weight_bytes);
}

void DraftHeadProposer::warm(const ShapeAxes& target) { run_axes(backend_, target, scratch_); }

}  // namespace inferd::engine
