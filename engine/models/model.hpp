// A loaded model behind one small interface: the scheduler hands it a step (tokens
// of several sequences, each with its position and block table) and gets logits
// back for the tokens it asked about. One implementation file per architecture.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/backend.hpp"

namespace inferd::engine {

class GgufFile;
class KvCache;
struct KvGeometry;

struct ModelConfig {
  std::string architecture;  // e.g. "llama"
  std::string name;          // general.name
  int n_layers = 0;
  int kv_layers = 0;         // layers of the paged KV cache; 0: n_layers
  int dim = 0;               // embedding width
  int n_heads = 0;
  int n_kv_heads = 0;
  int kv_heads_here = 0;     // kv heads this rank holds: all of them without tensor parallelism
  int head_dim = 0;
  int ffn_dim = 0;
  int vocab = 0;
  int max_context = 0;       // the model's trained context
  float norm_eps = 1e-5f;
  kernels::RopeParams rope;
  bool tied_embeddings = false;
};

// One forward step, as host data. Token i sits at positions[i] in a sequence
// whose block table starts at block_tables[table_of[i]]; its K/V are written
// into the cache at that position before attention reads positions 0..pos.
struct StepBatch {
  std::vector<int32_t> tokens;
  std::vector<int32_t> positions;
  std::vector<int32_t> table_of;
  std::vector<int32_t> block_tables;  // every sequence's table, one after another
  // The sequence each token belongs to (the scheduler's id), for a model that
  // holds its sequences' state itself (Model::holds_sequence_state).
  std::vector<uint64_t> seqs;
  // Indices into `tokens` whose logits are wanted (usually each sequence's last token).
  std::vector<int32_t> logits_rows;
  // Sampling where the logits are (Model::samples_on_device): one entry per
  // logits row. Empty: the logits come back and the caller samples.
  std::vector<kernels::RowSampling> sampling;
  // With `sampling`: the logits come back as well (a row is sampled by the caller).
  bool logits_too = false;

  size_t size() const { return tokens.size(); }
  void clear() {
    tokens.clear();
    positions.clear();
    table_of.clear();
    block_tables.clear();
    seqs.clear();
    logits_rows.clear();
    sampling.clear();
    logits_too = false;
  }
  // Appends a sequence's block table; returns what add() takes as `table`.
  int32_t add_table(std::span<const int32_t> table) {
    const auto at = static_cast<int32_t>(block_tables.size());
    block_tables.insert(block_tables.end(), table.begin(), table.end());
    return at;
  }
  void add(int32_t token, int32_t pos, int32_t table, bool want_logits, uint64_t seq = 0) {
    if (want_logits) logits_rows.push_back(static_cast<int32_t>(tokens.size()));
    tokens.push_back(token);
    positions.push_back(pos);
    table_of.push_back(table);
    seqs.push_back(seq);
  }
};

// How weights are held once loaded.
enum class Precision {
  Fast,   // as stored (quantized blocks), activations quantized per matmul
  Exact,  // every weight dequantized to F32 and F32 activations: the reference path
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;
  // Runs the step; logits (host memory) gets logits_rows.size() rows of
  // config().vocab floats. With batch.sampling, tokens (host memory) gets each
  // row's sampled token instead, and logits only if batch.logits_too. Where
  // features is given (host memory; only where emits_features()), it gets each
  // logits row's final hidden state as the head reads it (after the output
  // norm), config().dim floats a row: what a draft head reads.
  virtual void forward(const StepBatch& batch, KvCache& kv, float* logits, int32_t* tokens, float* features) = 0;
  void forward(const StepBatch& batch, KvCache& kv, float* logits, int32_t* tokens) {
    forward(batch, kv, logits, tokens, nullptr);
  }
  void forward(const StepBatch& batch, KvCache& kv, float* logits) { forward(batch, kv, logits, nullptr, nullptr); }
  // Whether forward() fills `features`, and the weights a draft head shares
  // with the model: the token embedding and the output head (host memory).
  virtual bool emits_features() const { return false; }
  struct SharedHead {
    kernels::WeightView embedding, output;
    float embed_scale = 1.0f;  // the model's scale on embedding rows
  };
  virtual SharedHead shared_head() const { return {}; }
  // Whether forward() takes batch.sampling: its backend samples and one rank holds the whole vocabulary.
  virtual bool samples_on_device() const { return false; }
  // Whether the model keeps each sequence's state itself, keyed by batch.seqs,
  // instead of in the paged KV cache (DeepSeek-V4's compressed streams). Such a
  // state only moves forward: no prefix sharing, no draft rollback.
  virtual bool holds_sequence_state() const { return false; }
  // Lets these sequences' states go: they ended, or lost their K/V and will be
  // fed again from position 0.
  virtual void release_sequences(std::span<const uint64_t> seqs) { (void)seqs; }
  // Lets every sequence's state go (an engine reset ended or re-queued them all).
  virtual void drop_sequences() {}
  // Throws std::invalid_argument, naming the setting, when the model cannot
  // keep its state in a cache of this geometry (the engine asks at start-up).
  virtual void check_kv_cache(const KvGeometry& g) const { (void)g; }
};

}  // namespace inferd::engine
