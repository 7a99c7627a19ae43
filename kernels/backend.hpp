// The op interface. The engine runs every numeric op through a Backend; the CPU
// backend (kernels/cpu) is always built and is the reference the CUDA backend is
// checked against. Pointers are in the backend's memory space. Matrices are row
// major; a weight W has `rows` output features of `cols` inputs each, so
// y[t][r] = sum_c W[r][c] * x[t][c].
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>

#include "kernels/cancelled.hpp"
#include "kernels/dtype.hpp"
#include "kernels/moe.hpp"
#include "kernels/scaled_weight.hpp"
#include "kernels/shape_registry.hpp"

namespace inferd::kernels {

struct WeightView {
  DType type = DType::F32;
  const void* data = nullptr;
  int64_t rows = 0;  // output features
  int64_t cols = 0;  // input features (multiple of the type's block size)
  size_t row_stride = 0;  // bytes between rows
};

// One layer of the paged KV cache: blocks of `block_size` token slots, each slot
// holding n_kv_heads * head_dim values for K and for V, in `type` (F16 or F32).
// Layout: [block][slot][kv_head][head_dim].
struct KvLayerView {
  DType type = DType::F16;
  void* k = nullptr;
  void* v = nullptr;
  int block_size = 16;
  int n_kv_heads = 0;
  int head_dim = 0;
};

// What attention needs of each token of a step: which sequence's block table it
// reads and its own position (it attends to positions 0..pos inclusive).
struct AttnToken {
  const int32_t* block_table = nullptr;
  int32_t pos = 0;
};

// One product of matmul_shared: y = W x.
struct MatmulOut {
  WeightView w;
  float* y = nullptr;
};

// What some architectures add to attention (Gemma 2): the scores soft-capped to
// softcap * tanh(score / softcap) before the softmax, and a sliding window (the
// token at position p reads positions p - window + 1 .. p only). 0 turns either off.
struct AttentionExtras {
  float softcap = 0;
  int32_t window = 0;
};

// How one logits row is sampled where the logits are (engine/sampler.hpp gives
// the parameters' meaning): the argmax when greedy, else a draw from the
// softmax of logits / temperature truncated by top-k, then top-p, then min-p.
// `random` is the row's randomness: the same bits draw the same token.
struct RowSampling {
  bool greedy = true;
  float temperature = 1;
  int32_t top_k = 0;  // <= 0: off
  float top_p = 1;
  float min_p = 0;
  int32_t n_valid = 0;  // ids from here on (a vocabulary padded past the tokenizer) are never drawn
  uint64_t random = 0;
};

struct RopeParams {
  int n_rot = 0;           // rotated dimensions per head (<= head_dim)
  float freq_base = 10000.f;
  float freq_scale = 1.f;  // linear scaling: position * freq_scale
  bool neox = false;       // false: adjacent pairs (GGUF llama); true: halves
};

class Backend;

// A device's memory as its driver counts it, every process's use included.
struct MemoryInfo {
  size_t free = 0;
  size_t total = 0;
};

// Memory a backend owns (device memory on a GPU, aligned host memory on the CPU),
// freed through that backend when the Buffer goes. Move-only.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Backend* owner, void* data, size_t bytes) : owner_(owner), data_(data), bytes_(bytes) {}
  Buffer(Buffer&& o) noexcept { swap(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    Buffer(std::move(o)).swap(*this);
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer();

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  template <class T>
  T* as() const { return static_cast<T*>(data_); }

 private:
  void swap(Buffer& o) noexcept {
    std::swap(owner_, o.owner_);
    std::swap(data_, o.data_);
    std::swap(bytes_, o.bytes_);
  }
  Backend* owner_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual int threads() const = 0;

  // Memory. Every pointer an op takes lies in this backend's memory: a Buffer
  // from alloc(), or, when host_visible(), any host memory (the mapped weights).
  // Whether host code may read and write this backend's memory directly.
  virtual bool host_visible() const = 0;
  // `bytes` of memory aligned to at least 64 bytes; zeroed when asked. Throws
  // std::bad_alloc when there is not enough.
  virtual Buffer alloc(size_t bytes, bool zeroed = false) = 0;
  // Host -> backend and backend -> host copies, in order with the ops: upload()
  // returns once `src` may be reused (the copy may still be queued), download()
  // once the bytes are in `dst`.
  virtual void upload(void* dst, const void* src, size_t bytes) = 0;
  virtual void download(void* dst, const void* src, size_t bytes) = 0;
  // Waits until every op queued so far has finished, so that another agent (a
  // collective library on a stream of its own) may read and write what they
  // wrote. Not within a captured step. The CPU's ops have finished on return.
  virtual void synchronize() {}
  // The device's memory now, for sizing the KV cache by it; nullopt where the
  // backend's memory is the host's.
  virtual std::optional<MemoryInfo> memory_info() { return std::nullopt; }

  // out[t][:] = dequantized row ids[t] of table (embedding lookup).
  // Whether its get_rows and matmul take weights of this type (checked at load,
  // so a model the backend cannot run is refused before it serves).
  virtual bool takes_weight_type(DType) const { return true; }
  virtual void get_rows(const WeightView& table, const int32_t* ids, int64_t n, float* out) = 0;
  // y[t][r] = sum_c W[r][c] * x[t][c] for t < n_tokens. x: [n_tokens][cols], y: [n_tokens][rows].
  virtual void matmul(const WeightView& w, const float* x, int64_t n_tokens, float* y) = 0;
  // Several weights applied to the same x (q, k and v; gate and up), so a backend
  // may prepare x once for all of them. Registers each weight's matmul launch key.
  virtual void matmul_shared(std::span<const MatmulOut> outs, const float* x, int64_t n_tokens) {
    for (const MatmulOut& o : outs) matmul(o.w, x, n_tokens, o.y);
  }
  // The SwiGLU feed-forward's first half: gate.y = silu(gate.w x) * (up.w x),
  // which a backend may compute without writing up.y (its contents are then
  // unspecified). Registers the launch keys of both matmuls and of silu_mul.
  virtual void matmul_silu_mul(const MatmulOut& gate, const MatmulOut& up, const float* x, int64_t n_tokens) {
    const MatmulOut outs[] = {gate, up};
    matmul_shared(outs, x, n_tokens);
    silu_mul(gate.y, up.y, gate.y, n_tokens * gate.w.rows);
  }
  // Weights with separate block scales (scaled_weight.hpp: FP8 block-scaled,
  // MXFP4), read in place. y[t][r] = sum_c W[r][c] * x[t][c] like matmul, the
  // activations used as they are (f32). An optional op: a backend without it
  // says so in takes_scaled_format (checked at load) and throws if called.
  virtual bool takes_scaled_format(ScaledFormat) const { return false; }
  virtual void matmul_scaled(const ScaledWeightView& w, const float* x, int64_t n_tokens, float* y) {
    (void)x, (void)n_tokens, (void)y;
    throw std::logic_error("matmul_scaled: " + std::string(format_name(w.format)) +
                           " weights are not implemented on the " + name() + " backend");
  }
  // A mixture of experts' routed feed-forward (moe.hpp), optional like
  // matmul_scaled (a backend has both or neither). moe_route: router logits
  // [n_tokens][r.n_experts] -> expert ids and weights [n_tokens][r.top_k];
  // token_ids for hash routing only. moe_experts: y[t] = the weighted sum of
  // token t's experts on x[t] (x: [n_tokens][dim], y the same, not overlapping
  // x), SwiGLU clamped by swiglu_limit (<= 0: none).
  virtual void moe_route(const MoeRouting& r, const float* logits, int64_t n_tokens, const int32_t* token_ids,
                         int32_t* ids, float* weights) {
    (void)r, (void)logits, (void)n_tokens, (void)token_ids, (void)ids, (void)weights;
    throw std::logic_error("moe_route is not implemented on the " + name() + " backend");
  }
  virtual void moe_experts(std::span<const ExpertWeights> experts, float swiglu_limit, const float* x,
                           int64_t n_tokens, int top_k, const int32_t* ids, const float* weights, float* y) {
    (void)experts, (void)swiglu_limit, (void)x, (void)n_tokens, (void)top_k, (void)ids, (void)weights, (void)y;
    throw std::logic_error("moe_experts is not implemented on the " + name() + " backend");
  }
  // y = x / rms(x) * weight, per row of n.
  virtual void rmsnorm(const float* x, const float* weight, float* y, int64_t n_rows, int64_t n, float eps) = 0;
  // x += residual (n_rows * n), then y = rmsnorm(x) * weight: a residual add and
  // the next norm, which a backend may do in one pass. y may be residual.
  // Registers the launch keys of add and rmsnorm.
  virtual void add_rmsnorm(float* x, const float* residual, const float* weight, float* y, int64_t n_rows, int64_t n,
                           float eps) {
    add(x, residual, n_rows * n);
    rmsnorm(x, weight, y, n_rows, n, eps);
  }
  // In place on x: [n_tokens][n_heads][head_dim], position pos[t] for token t.
  virtual void rope(float* x, const int32_t* pos, int64_t n_tokens, int n_heads, int head_dim,
                    const RopeParams& p) = 0;
  // The attention inputs of a step: rope of q ([n_tokens][n_heads][kv.head_dim])
  // and of k ([n_tokens][kv.n_kv_heads][kv.head_dim]) in place, positions pos[t],
  // then k and v stored into the cache slots of the tokens' positions, which a
  // backend may do in one pass. Registers the launch keys of both ropes and kv_store.
  virtual void rope_kv_store(float* q, float* k, const float* v, const int32_t* pos, int64_t n_tokens, int n_heads,
                             const RopeParams& p, const KvLayerView& kv, const AttnToken* toks) {
    rope(q, pos, n_tokens, n_heads, kv.head_dim, p);
    rope(k, pos, n_tokens, kv.n_kv_heads, kv.head_dim, p);
    kv_store(kv, toks, n_tokens, k, v);
  }
  // out = silu(gate) * up, elementwise over n.
  virtual void silu_mul(const float* gate, const float* up, float* out, int64_t n) = 0;
  // y += x, elementwise over n.
  virtual void add(float* y, const float* x, int64_t n) = 0;

  // The ops only some architectures use (Gemma): a backend that has them says
  // so, and a model that needs them is refused at load on one that has not.
  virtual bool has_extra_ops() const { return false; }
  // out = gelu(gate) * up elementwise over n, gelu's tanh approximation.
  virtual void gelu_mul(const float* gate, const float* up, float* out, int64_t n) {
    (void)gate, (void)up, (void)out, (void)n;
    throw std::logic_error(name() + " backend: gelu_mul is not implemented");
  }
  // x *= s, elementwise over n.
  virtual void scale(float* x, float s, int64_t n) {
    (void)x, (void)s, (void)n;
    throw std::logic_error(name() + " backend: scale is not implemented");
  }
  // x = cap * tanh(x / cap), elementwise over n: soft-capped logits.
  virtual void softcap(float* x, float cap, int64_t n) {
    (void)x, (void)cap, (void)n;
    throw std::logic_error(name() + " backend: softcap is not implemented");
  }
  // Each of n_rows rows of y (n wide) += x: a bias. Runs as one add per row,
  // so it registers the launch key of add(n).
  virtual void add_rows(float* y, const float* x, int64_t n_rows, int64_t n) {
    for (int64_t r = 0; r < n_rows; ++r) add(y + r * n, x, n);
  }
  // dst[r][c] = src[r][c] for r < rows, c < cols, rows src_stride and
  // dst_stride floats apart: a tensor-parallel rank's slice of the logits put
  // in place among the others'.
  virtual void copy_rows(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t rows,
                         int64_t cols) {
    (void)src, (void)src_stride, (void)dst, (void)dst_stride, (void)rows, (void)cols;
    throw std::logic_error(name() + " backend: copy_rows is not implemented");
  }
  // Writes k, v ([n_tokens][n_kv_heads][head_dim]) into the slots of the tokens' positions.
  virtual void kv_store(const KvLayerView& kv, const AttnToken* toks, int64_t n_tokens, const float* k,
                        const float* v) = 0;
  // Causal attention through the block tables. q: [n_tokens][n_heads][head_dim],
  // out: same shape. Grouped-query: head h reads kv head h / (n_heads / n_kv_heads).
  // `reach`: the largest position among the tokens, plus one. The caller knows it
  // on the host, so a device backend need not read the tokens back to size its launch.
  virtual void attention(const KvLayerView& kv, const AttnToken* toks, int64_t n_tokens, int64_t reach,
                         const float* q, int n_heads, float scale, float* out) = 0;
  // attention() with soft-capped scores or a sliding window; without either it is attention().
  virtual void attention_extra(const KvLayerView& kv, const AttnToken* toks, int64_t n_tokens, int64_t reach,
                               const float* q, int n_heads, float scale, const AttentionExtras& extras, float* out) {
    if (extras.softcap != 0 || extras.window != 0)
      throw std::logic_error(name() + " backend: attention with soft-capped scores or a sliding window is not implemented");
    attention(kv, toks, n_tokens, reach, q, n_heads, scale, out);
  }

  // Sampling where the logits are, so a step needs to bring back only its
  // tokens. tokens[r] = the token drawn from row r of logits ([rows][vocab]) as
  // params[r] says; logits, params and tokens are in the backend's memory. It
  // registers no launch key of its own: its one shape, the step's logits rows,
  // is the key of the head's matmul just before it.
  virtual bool can_sample() const { return false; }
  virtual void sample(const float* logits, int64_t rows, int64_t vocab, const RowSampling* params, int32_t* tokens) {
    (void)logits, (void)rows, (void)vocab, (void)params, (void)tokens;
    throw std::logic_error(name() + " backend: sample is not implemented");
  }

  ShapeRegistry& shapes() { return ShapeRegistry::global(); }

  // An op of another library among this backend's (a GPU rank's NCCL
  // collective): `launch` gets the backend's queue (its stream; null where ops
  // have finished on return) and queues the op there without waiting. In a
  // captured step it is recorded and replayed with the step's ops; `what` and
  // `args` join the step's signature as an op's name and arguments do, so a
  // change in them (a re-formed group) records the step anew. `launch` holds
  // its arguments by value: a backend may keep it.
  virtual void queue_external(const char* what, std::span<const uint64_t> args,
                              const std::function<void(void* queue)>& launch) {
    (void)what, (void)args;
    launch(nullptr);
  }

  // Captured steps (CUDA graphs). A backend that can record a whole step's
  // launches once and replay them says so here; the engine then runs its decode
  // steps of the sizes configured through run_captured(). The others run `step`
  // as it is.
  virtual bool can_capture() const { return false; }
  // Runs `step` (a forward pass: ops, one or more uploads before them, downloads
  // after them) as captured step `key`. The first call records its launches and
  // runs them. A later call runs `step` on the host only, to queue its uploads and
  // to check that it would launch exactly what was recorded (the same ops, shapes
  // and addresses; sizes that only the device reads, such as positions, may
  // differ), then replays the recording; when it would not, `step` runs once
  // more and is recorded anew. So `step` may run twice and must have no effect
  // besides its ops and copies. Uploads land before the step's first op;
  // downloads land when run_captured returns.
  virtual void run_captured(int64_t key, const std::function<void()>& step) {
    (void)key;
    step();
  }

  // While *flag is true, ops throw Cancelled at their next boundary: the CPU
  // backend between the tasks of each op (a task still running is waited for),
  // a device backend before queueing the next op (what is queued still runs).
  // Set once, before the first op.
  virtual void set_cancel_flag(const std::atomic<bool>* flag) { cancel_ = flag; }

 protected:
  friend class Buffer;
  virtual void free(void* data) = 0;
  void throw_if_cancelled() const {
    if (cancel_requested(cancel_)) throw Cancelled();
  }

 private:
  const std::atomic<bool>* cancel_ = nullptr;
};

inline Buffer::~Buffer() {
  if (data_) owner_->free(data_);
}

// How an engine gets its backend: called once per model it loads.
using BackendFactory = std::function<std::unique_ptr<Backend>()>;

// threads <= 0: one per online core.
std::unique_ptr<Backend> make_cpu_backend(int threads);

}  // namespace inferd::kernels
