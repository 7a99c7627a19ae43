// DeepSeek-V4 behind the engine's Model interface: the checkpoint directory the
// GgufFile stands for (engine/hf_checkpoint.hpp) is loaded by DeepseekV4.
//
// The compressed streams live in the paged KV cache: a compressed layer's
// pooled entries in its K blocks, a ratio-4 layer's indexer keys in its V
// blocks, each in the block of the sequence that holds its window's first
// position (DeepseekV4Pages). So the blocks a sequence holds grow with what it
// has pooled, and the scheduler's block budget, preemption and release cover
// them. Only a layer of the cache per compressed layer is made, each block
// sized for a ratio-4 layer's block_size / 4 entries (in F16 elements of the
// geometry: the rows are float32). What each sequence keeps bounded (its
// window's keys and the compressors' unpooled inputs, a few windows' worth) is
// held here, keyed by the scheduler's sequence id.
#include <algorithm>
#include <stdexcept>
#include <unordered_map>

#include "engine/gguf_reader.hpp"
#include "engine/kv/kv_cache.hpp"
#include "engine/models/deepseek_v4.hpp"
#include "engine/models/model_registry.hpp"

namespace inferd::engine {
namespace {

class DeepseekV4Sequences final : public Model {
 public:
  DeepseekV4Sequences(std::unique_ptr<DeepseekV4> model, ModelConfig config)
      : model_(std::move(model)), config_(std::move(config)) {}

  const ModelConfig& config() const override { return config_; }
  bool holds_sequence_state() const override { return true; }
  void release_sequences(std::span<const uint64_t> seqs) override {
    for (uint64_t s : seqs) states_.erase(s);
  }
  void drop_sequences() override { states_.clear(); }

  // The cache must be the one config() asked for, in blocks that hold whole
  // windows (the engine asks once, at start-up, not every step).
  void check_kv_cache(const KvGeometry& g) const override {
    if (g.type != kernels::DType::F16 || g.n_layers != config_.kv_layers || g.head_dim != config_.head_dim ||
        g.n_kv_heads != 1)
      throw std::logic_error("deepseek_v4: a KV cache of another geometry than the model asked for");
    const int64_t bs = g.block_size;
    bool fits = bs % 4 == 0;
    for (int64_t r : model_->config().ratios)
      if (r > 0) fits = fits && (r <= bs ? bs % r == 0 : r % bs == 0);
    if (!fits)
      throw std::invalid_argument("deepseek_v4: block_size " + std::to_string(bs) +
                                  " must be a multiple of 4 that divides, or is a multiple of, each compress ratio");
  }

  void forward(const StepBatch& batch, KvCache& kv, float* logits, int32_t*, float*) override {
    if (!batch.sampling.empty()) throw std::logic_error("deepseek_v4: sampling on the device is not supported");
    if (batch.seqs.size() != batch.size()) throw std::logic_error("deepseek_v4: a step without its sequence ids");
    std::vector<DeepseekV4Feed> feeds;
    for (size_t first = 0; first < batch.size();) {
      size_t end = first + 1;
      while (end < batch.size() && batch.seqs[end] == batch.seqs[first]) ++end;
      for (size_t i = first; i < end; ++i)
        if (batch.positions[i] != batch.positions[first] + static_cast<int32_t>(i - first))
          throw std::logic_error("deepseek_v4: a sequence's tokens in one step are not at consecutive positions");
      // A table runs from its offset to the next sequence's (tables are added in order), or to the end.
      const auto at = static_cast<size_t>(batch.table_of[first]);
      size_t table_end = batch.block_tables.size();
      for (size_t i = end; i < batch.size(); ++i)
        if (static_cast<size_t>(batch.table_of[i]) > at) {
          table_end = static_cast<size_t>(batch.table_of[i]);
          break;
        }
      const auto table = std::span(batch.block_tables).subspan(at, table_end - at);
      feeds.push_back({&state_at(batch.seqs[first], batch.positions[first], kv, table),
                       std::span(batch.tokens).subspan(first, end - first)});
      first = end;
    }
    const std::vector<float> wanted = model_->forward(feeds, nullptr, &batch.logits_rows);
    std::copy(wanted.begin(), wanted.end(), logits);
  }

 private:
  // The state `seq` continues from at `position`. Position 0 starts afresh. A
  // sequence first seen further on (the warm-up's unwritten prefix, the shape
  // tracer's deep decodes) starts from filler tokens fed one at a time: its
  // contents are arbitrary, as unwritten slots of the paged cache are, and its
  // shapes are a decode's, which traffic reaches anyway.
  DeepseekV4State& state_at(uint64_t seq, int32_t position, const KvCache& kv, std::span<const int32_t> table) {
    const auto it = states_.find(seq);
    if (position == 0) return paged(states_[seq] = DeepseekV4State{}, kv, table);
    if (it != states_.end()) {
      if (it->second.position != position)
        throw std::logic_error("deepseek_v4: sequence " + std::to_string(seq) + " fed at position " +
                               std::to_string(position) + ", its state is at " +
                               std::to_string(it->second.position));
      return paged(it->second, kv, table);
    }
    DeepseekV4State& s = paged(states_[seq], kv, table);
    const int32_t filler = 0;
    const std::vector<int32_t> no_logits;
    while (s.position < position) {
      const DeepseekV4Feed feed{&s, std::span(&filler, 1)};
      model_->forward(std::span(&feed, 1), nullptr, &no_logits);
    }
    return s;
  }

  // Points the state's compressors at this step's block table (it grows as
  // the sequence does): each compressed layer's own layer of the cache.
  DeepseekV4State& paged(DeepseekV4State& s, const KvCache& kv, std::span<const int32_t> table) const {
    const DeepseekV4Config& c = model_->config();
    s.layers.resize(static_cast<size_t>(c.layers));
    const KvGeometry& g = kv.geometry();
    const auto stride = static_cast<int64_t>(g.bytes_per_block_layer() / sizeof(float));
    for (int64_t l = 0, slot = 0; l < c.layers; ++l) {
      if (c.ratios[size_t(l)] == 0) continue;
      const kernels::KvLayerView view = kv.layer(static_cast<int>(slot++));
      auto& layer = s.layers[size_t(l)];
      layer.compressor.pages = {static_cast<float*>(view.k), stride, g.block_size, table};
      layer.index.pages = {static_cast<float*>(view.v), stride, g.block_size, table};
    }
    return s;
  }

  std::unique_ptr<DeepseekV4> model_;
  ModelConfig config_;
  std::unordered_map<uint64_t, DeepseekV4State> states_;
};

}  // namespace

std::unique_ptr<Model> make_deepseek_v4(const GgufFile& file, kernels::Backend& backend, Precision,
                                        WeightLoader& weights, const TensorParallel& tp) {
  if (tp.size > 1) throw LoadError(file.path(), 0, "deepseek_v4 does not run with tensor parallelism yet");
  auto model = DeepseekV4::load(file.path(), backend);
  const DeepseekV4Config& c = model->config();
  ModelConfig mc;
  mc.architecture = "deepseek_v4";
  mc.name = file.get_string("general.name").value_or("deepseek_v4");
  mc.dim = static_cast<int>(c.hidden);
  mc.n_heads = static_cast<int>(c.heads);
  // A layer of the cache per compressed layer, a block's K holding block_size / 4
  // float rows of head_dim (head_dim / 2 F16 elements a position) and its V as
  // many of the indexer's narrower keys.
  int compressed = 0;
  for (int64_t r : c.ratios) compressed += r > 0;
  if (c.index_head_dim > c.head_dim)
    throw LoadError(file.path(), 0, "deepseek_v4: index_head_dim above head_dim is not supported");
  mc.n_layers = static_cast<int>(c.layers);
  mc.kv_layers = std::max(compressed, 1);
  mc.n_kv_heads = mc.kv_heads_here = 1;
  mc.head_dim = static_cast<int>(c.head_dim / 2);
  mc.ffn_dim = static_cast<int>(c.moe_inter);
  mc.vocab = static_cast<int>(c.vocab);
  const auto context = file.get_int("deepseek_v4.context_length");
  if (!context || *context < 2 || *context > (int64_t{1} << 30)) throw LoadError(file.path(), 0, "missing deepseek_v4.context_length (max_position_embeddings)");
  mc.max_context = static_cast<int>(*context);
  mc.norm_eps = c.norm_eps;
  weights.finish();
  return std::make_unique<DeepseekV4Sequences>(std::move(model), std::move(mc));
}

}  // namespace inferd::engine
