// DeepSeek-V4 behind the engine's Model interface: the checkpoint directory the
// GgufFile stands for (engine/hf_checkpoint.hpp) is loaded by DeepseekV4, and
// each sequence's state (window keys, compressor buffers and pooled entries)
// is held here, keyed by the scheduler's sequence id, instead of in the paged
// KV cache, whose blocks then only count what a sequence may hold.
#include <spdlog/spdlog.h>

#include <stdexcept>
#include <unordered_map>

#include "engine/gguf_reader.hpp"
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

  void forward(const StepBatch& batch, KvCache&, float* logits, int32_t*) override {
    if (!batch.sampling.empty()) throw std::logic_error("deepseek_v4: sampling on the device is not supported");
    if (batch.seqs.size() != batch.size()) throw std::logic_error("deepseek_v4: a step without its sequence ids");
    std::vector<DeepseekV4Feed> feeds;
    for (size_t first = 0; first < batch.size();) {
      size_t end = first + 1;
      while (end < batch.size() && batch.seqs[end] == batch.seqs[first]) ++end;
      for (size_t i = first; i < end; ++i)
        if (batch.positions[i] != batch.positions[first] + static_cast<int32_t>(i - first))
          throw std::logic_error("deepseek_v4: a sequence's tokens in one step are not at consecutive positions");
      feeds.push_back({&state_at(batch.seqs[first], batch.positions[first]),
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
  DeepseekV4State& state_at(uint64_t seq, int32_t position) {
    const auto it = states_.find(seq);
    if (position == 0) return states_[seq] = DeepseekV4State{};
    if (it != states_.end()) {
      if (it->second.position != position)
        throw std::logic_error("deepseek_v4: sequence " + std::to_string(seq) + " fed at position " +
                               std::to_string(position) + ", its state is at " +
                               std::to_string(it->second.position));
      return it->second;
    }
    DeepseekV4State& s = states_[seq];
    const int32_t filler = 0;
    const std::vector<int32_t> no_logits;
    while (s.position < position) {
      const DeepseekV4Feed feed{&s, std::span(&filler, 1)};
      model_->forward(std::span(&feed, 1), nullptr, &no_logits);
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
  mc.n_layers = static_cast<int>(c.layers);
  mc.dim = static_cast<int>(c.hidden);
  mc.n_heads = static_cast<int>(c.heads);
  // One shared latent per position: what the paged blocks count.
  mc.n_kv_heads = mc.kv_heads_here = 1;
  mc.head_dim = static_cast<int>(c.head_dim);
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
