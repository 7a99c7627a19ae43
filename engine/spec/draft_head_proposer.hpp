// Draft-head proposer: drafts from the target's own hidden state, the slot a
// multi-token-prediction head (MTP, EAGLE, DeepSeek-V4's DSpark stages) plugs
// into. After each step the engine hands it, per sequence, the feature the
// target computed at its last fed position (the final hidden state the output
// head reads: Model::forward's `features`), which produced the sequence's
// newest token. The head predicts the next feature from that feature and that
// token, and the target's own output head turns the prediction into a draft;
// fed back with the draft, it predicts the one after, and so on:
//
//   z = W_f f[t] + W_x embed(x[t+1]) + b
//   f[t+1] = z + W_down (silu(W_gate z) * W_up z),    d = argmax(output . f[t+1])
//
// With `lookup`, prompt lookup (ngram_proposer.hpp) drafts too, where the
// sequence's last tokens recur earlier in it: text that copies itself is what
// the head, which sees no earlier positions, drafts worst. Each sequence takes
// the proposal of the source whose drafts it has kept more often (a faded
// running rate per sequence and source, from the length the next observe()
// reports), prompt lookup on a tie.
//
// The head drafts from a vocabulary of its own (the tokens its training data
// held): only those rows of the output head are scored, a fraction of the
// vocabulary's. All drafting sequences go through each of these steps
// together. The head's weights (a GGUF of architecture "draft_head",
// tools/train_draft_head.py) are trained for one model's features and refused
// for another's (the checksum of the embedding they share). It runs on the
// host's memory: the CPU backend.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/models/model.hpp"
#include "engine/spec/ngram_proposer.hpp"
#include "engine/spec/proposer.hpp"

namespace inferd::engine {

class GgufFile;

// What a head records of the model it was trained for (draft_head.embedding_crc32):
// the CRC-32 of the stored bytes of its token embedding, which the head shares.
uint32_t draft_head_fingerprint(const GgufFile& target);

struct DraftHeadOptions {
  std::string path;                // the head's GGUF file
  int num_speculative_tokens = 5;  // drafts per sequence at most
  int n_tokens = 0;                // ids the tokenizer knows: padding ids are never proposed
  size_t target_weight_bytes = 0;  // what a decode step of the target reads (draft_cost); 0: unknown
  std::optional<NgramOptions> lookup;  // prompt lookup beside the head; unset: the head alone
};

class DraftHeadProposer final : public Proposer {
 public:
  // Throws std::invalid_argument (or LoadError) naming the file when the head
  // does not belong to `target`, or the target gives no features.
  DraftHeadProposer(const DraftHeadOptions& opts, kernels::Backend& backend, const Model& target,
                    const GgufFile& target_file);
  ~DraftHeadProposer() override;

  bool reads_features() const override { return true; }
  void observe(uint64_t seq, size_t n_tokens, std::span<const float> feature) override;
  void propose(std::span<const DraftRequest> reqs, std::vector<std::vector<int32_t>>& drafts) override;
  void release(uint64_t seq) override { features_.erase(seq); }
  void clear() override { features_.clear(); }
  std::vector<kernels::ShapeKey> reachable_shape_keys(const ShapeAxes& target) const override;
  void warm(const ShapeAxes& target) override;
  // The verify step's share plus the head's own: decoding is bound by memory,
  // so a head step costs what it reads (its matrices and its rows of the
  // output head) over what a target step reads (its weights).
  double draft_cost() const override;

  size_t sequences_held() const { return features_.size(); }

 private:
  enum Source { kHead, kLookup };
  struct Feature {
    size_t n_tokens = 0;  // the sequence's length when it was observed
    std::vector<float> f;
    AcceptanceRate rates[2];  // how often each source's drafts were kept, faded as DraftPace fades
    // The last proposal, made at length n_tokens: its source and how many drafts.
    Source source = kHead;
    int drafted = 0;
  };
  struct Scratch {
    std::vector<float> f, x, gate, up, logits;  // a step's rows
  };
  // One head step for n rows on `be`: f (n x dim) becomes the next features,
  // tokens (the last drafts) the drafts they give.
  void step(kernels::Backend& be, int64_t n, float* f, int32_t* tokens, Scratch& s) const;
  // One step per representative of the sampled-sequence axis, with zeros.
  void run_axes(kernels::Backend& be, const ShapeAxes& target, Scratch& s) const;

  DraftHeadOptions opts_;
  kernels::Backend& backend_;
  Model::SharedHead shared_;
  int dim_ = 0, vocab_ = 0;
  std::unique_ptr<GgufFile> file_;
  int ffn_dim_ = 0;
  kernels::WeightView w_feature_, w_token_, w_gate_, w_up_, w_down_;
  const float* bias_ = nullptr;
  std::vector<int32_t> draft_ids_;   // the ids the head drafts
  std::vector<uint8_t> out_rows_;    // their rows of the target's output head
  kernels::WeightView draft_output_;
  std::unordered_map<uint64_t, Feature> features_;
  std::optional<NgramProposer> lookup_;
  Scratch scratch_;
};

}  // namespace inferd::engine
