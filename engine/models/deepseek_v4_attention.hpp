// DeepSeek-V4's attention pieces that are not matmuls, as host math in float32
// over a run of positions of one sequence: the partial interleaved RoPE, the
// compressor's pooling of token windows into compressed entries, the
// lightning indexer's choice of entries, and the single-latent attention with
// per-head sinks over a window plus compressed entries.
#pragma once
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

namespace inferd::engine::dsv4 {

// RoPE on the last `rot` dims of each head of width `head_dim`, pairs (2i, 2i + 1)
// rotated as complex numbers by pos * freq[i].
struct TailRope {
  int head_dim = 0, rot = 0;
  std::vector<float> freq;  // rot / 2 of them

  // theta^(-2i/rot); with a YaRN factor > 0 the high dims blended towards
  // freq / factor between the correction dims of beta_fast and beta_slow
  // (amplitude unchanged: no mscale).
  struct Yarn {
    float factor = 0;
    double original_context = 0, beta_fast = 32, beta_slow = 1;
  };
  static TailRope make(int head_dim, int rot, double theta, const Yarn& yarn);
  // x: n_heads heads of head_dim at position pos; inverse rotates by -pos * freq.
  void apply(float* x, int n_heads, int64_t pos, bool inverse = false) const;
};

// A compressor's buffered inputs: kv and score [n_tokens][coff * dim] from its
// projections, the score already plus ape[t % ratio], of the positions from
// window_start(first_window) on. coff is 2 for ratio 4 (overlapping windows),
// else 1.
struct CompressorInput {
  int ratio = 0, dim = 0;
  int64_t first_window = 0;  // the first window not pooled yet
  int64_t n_tokens = 0;
  const float* kv = nullptr;
  const float* score = nullptr;

  bool overlap() const { return ratio == 4; }
  // With overlap, window w also reads window w - 1's tokens, so the buffer
  // starts a window earlier.
  int64_t window_start(int64_t window) const { return std::max<int64_t>(0, window - (overlap() ? 1 : 0)) * ratio; }
};

// One entry per window from first_window that the buffer closes,
// [closed][dim], before its norm: per channel, the softmax over the window's
// slots of score weighting kv. With overlap, entry w pools window w's tokens
// on the second half of the channels and window w - 1's on the first half
// (none for w = 0).
std::vector<float> pool_windows(const CompressorInput& in);

// The indexer's choice for query t of `k` entries: the top k by score among
// entries j < (t + 1) / ratio (the windows closed by t), highest first, ties to
// the lower index; -1 fills the slots past the visible entries.
// q: [n_heads][head_dim] of the query; weights [n_heads] already scaled;
// keys: the entries' rows of head_dim, by row pointer.
// score_j = sum_h w_h * relu(q_h . key_j) * head_dim^-1/2.
struct IndexerQuery {
  int n_heads = 0, head_dim = 0;
  const float* q = nullptr;
  const float* weights = nullptr;
};
void index_topk(const IndexerQuery& q, std::span<const float* const> keys, int64_t pos, int ratio, int k,
                int32_t* out);

// One query's single-latent attention: q [n_heads][dim], keys (also the values)
// gathered by row pointer; p = softmax over the keys of q . key * scale with
// sink_h added to the denominator as exp(sink_h - max); out [n_heads][dim] = sum p * key.
void sink_attention(const float* q, int n_heads, int dim, std::span<const float* const> keys, const float* sinks,
                    float scale, float* out);

}  // namespace inferd::engine::dsv4
