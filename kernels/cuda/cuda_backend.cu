// The CUDA backend: memory, argument checks and launch keys (the same keys the
// CPU backend registers, so warm-up covers both), then the launchers of
// cuda_ops.hpp on the backend's stream.
//
// Captured steps (run_captured): a step's kernels are recorded once per key as
// a CUDA graph by stream capture, and replayed with one launch, so a decode step
// costs one launch instead of hundreds. Copies stay outside the graph: uploads
// are queued before its launch, downloads after it, one sync per step. A replay
// runs the step's host code with every launch skipped: each op compares its
// arguments (shapes and device addresses, the signature) with the recording's,
// and any difference (a buffer that grew, say) records the step again, so a
// graph never runs on memory the step no longer uses. Nothing a kernel reads on
// the host side varies between replays: attention slices each token's context
// from its position in device memory (attention.cu), for every position at once.
#include "kernels/cuda/cuda_backend.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <map>
#include <new>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "kernels/cuda/cuda_ops.hpp"
#include "kernels/launch_keys.hpp"

namespace inferd::kernels {
namespace cuda {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

namespace {

constexpr int64_t kMaxGridY = 65535;  // tokens per step: they go on a grid's y or z axis
constexpr int kMaxHeadDim = 1024;
// Quantized activations of 64 tokens of rows up to 52k columns (1.25 bytes a value).
constexpr size_t kMinActScratch = size_t(4) << 20;

bool is_quantized(DType t) { return t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q8_0; }

// Device memory that only grows, for per-launch intermediates (CudaBackend::grow).
struct Scratch {
  void* data = nullptr;
  size_t bytes = 0;
};

// What a captured step's signature records of an op argument: pointers and
// integers as they are, floats by their bits.
inline uint64_t word(const void* p) { return reinterpret_cast<uintptr_t>(p); }
inline uint64_t word(float f) { return std::bit_cast<uint32_t>(f); }
template <class I>
  requires std::is_integral_v<I> || std::is_enum_v<I>
inline uint64_t word(I i) {
  return static_cast<uint64_t>(i);
}

// A captured step: its launches as an executable graph, and every op's
// arguments as they were recorded, which a replay must match word for word.
struct Graph {
  cudaGraphExec_t exec = nullptr;
  std::vector<uint64_t> signature;
  std::vector<void*> keep;  // device memory freed while recording, which the recording still uses
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, CudaOptions opts) : device_(device), opts_(opts) {
    if (const char* e = std::getenv("INFERD_CUDA_FUSE"); e && std::string_view(e) == "1") opts_.fuse_one_token = true;
    check(cudaSetDevice(device), "cudaSetDevice");
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
    name_ = std::string("cuda-") + std::to_string(device) + " " + prop.name;
    sm_count_ = prop.multiProcessorCount;
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    // Host memory the device writes directly: an embedding lookup's bad id is
    // reported at the next download without a copy of its own.
    check(cudaHostAlloc(&bad_id_, sizeof(int), cudaHostAllocMapped), "cudaHostAlloc");
    *bad_id_ = 0;
    check_blas_create(cublasCreate(&blas_));
  }
  ~CudaBackend() override {
    cudaStreamSynchronize(stream_);
    for (auto& [key, g] : graphs_) drop(g);
    cudaFree(act_.data);
    cudaFree(attn_.data);
    cudaFree(tc_.data);
    cublasDestroy(blas_);
    cudaFreeHost(bad_id_);
    cudaStreamDestroy(stream_);
  }

  std::string name() const override { return name_; }
  int threads() const override { return 1; }  // host threads: the ops only queue work

  bool host_visible() const override { return false; }

  std::optional<MemoryInfo> memory_info() override {
    select();
    MemoryInfo m;
    check(cudaMemGetInfo(&m.free, &m.total), "cudaMemGetInfo");
    return m;
  }

  Buffer alloc(size_t bytes, bool zeroed) override {
    select();
    const size_t rounded = (bytes + 255) / 256 * 256;
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, rounded == 0 ? 256 : rounded);
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clear it: the failure is reported as bad_alloc
      throw std::bad_alloc();
    }
    check(e, "cudaMalloc");
    Buffer buf(this, p, bytes);
    if (zeroed && mode_ == Mode::Record) {
      pending_.push_back({p, {}, rounded});  // not part of the recording: zeroed once, before it runs
    } else if (zeroed) {
      check(cudaMemsetAsync(p, 0, rounded, stream_), "cudaMemsetAsync");
    }
    return buf;
  }

  // From pageable memory the driver copies `src` before returning, so the copy
  // can stay queued: the step's kernels follow it on the stream.
  void upload(void* dst, const void* src, size_t bytes) override {
    select();
    if (mode_ != Mode::Eager) queue("upload", dst);
    if (mode_ == Mode::Record) {
      const auto* b = static_cast<const std::byte*>(src);
      pending_.push_back({dst, std::vector<std::byte>(b, b + bytes), bytes});
      return;
    }
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "upload: cudaMemcpyAsync");
  }

  void download(void* dst, const void* src, size_t bytes) override {
    select();
    if (mode_ != Mode::Eager) {
      // Issued after the graph, not part of it: a replay may bring back other
      // results (its tokens alone, or its logits too) than its recording did.
      downloads_.push_back({dst, src, bytes});
      return;
    }
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "download: cudaMemcpyAsync");
    sync("download");
  }

  void synchronize() override {
    select();
    if (mode_ != Mode::Eager) throw std::logic_error("synchronize: a captured step cannot wait for its own ops");
    sync("synchronize");
  }

  // Queued on the stream like a kernel: in a captured step, recorded with them.
  void queue_external(const char* what, std::span<const uint64_t> args,
                      const std::function<void(void* queue)>& launch) override {
    throw_if_cancelled();
    select();
    if (mode_ == Mode::Eager) return launch(stream_);  // no signature to note: nothing to gather
    std::vector<uint64_t> words{word(what)};
    words.insert(words.end(), args.begin(), args.end());
    if (queue_words(words)) launch(stream_);
  }

  bool can_capture() const override { return true; }

  void run_captured(int64_t key, const std::function<void()>& step) override {
    select();
    Graph& g = graphs_[key];
    if (g.exec) {
      bool same = false;
      {
        StepMode replay(*this, Mode::Replay, &g);
        step();
        same = !mismatch_ && cursor_ == g.signature.size();
        if (same) {
          LaunchScope scope(launch_keys::graph_replay(key));
          launch(g);
        }
      }
      if (same) return;
      drop(g);  // the step no longer launches what was recorded: record it anew
    }
    record(key, g, step);
  }

  bool takes_weight_type(DType t) const override {
    return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::Q4_0 || t == DType::Q4_1 ||
           t == DType::Q8_0;
  }

  void get_rows(const WeightView& table, const int32_t* ids, int64_t n, float* out) override {
    LaunchScope scope(launch_keys::get_rows(table, n));
    check_tokens(n, "get_rows");
    select();
    if (!queue("get_rows", table.type, table.data, table.rows, table.cols, table.row_stride, ids, n, out)) return;
    cuda::get_rows(table, ids, n, out, bad_id_, stream_);
  }

  void matmul(const WeightView& w, const float* x, int64_t n_tokens, float* y) override {
    const MatmulOut out{w, y};
    matmul_shared({&out, 1}, x, n_tokens);
  }

  // Quantized weights of one type and row length below tensor-core sizes share
  // one quantization of x: q, k and v (or gate and up) cost one activation
  // kernel instead of three (or two).
  void matmul_shared(std::span<const MatmulOut> outs, const float* x, int64_t n_tokens) override {
    throw_if_cancelled();
    if (outs.empty()) return;
    if (!shares_quantization(outs, n_tokens)) {
      for (const MatmulOut& o : outs) matmul_one(o.w, x, n_tokens, o.y);
      return;
    }
    matmul_quantized(outs, x, n_tokens, false);
  }

  // One token: silu(gate) * up comes out of the GEMV itself (cuda::Fuse).
  void matmul_silu_mul(const MatmulOut& gate, const MatmulOut& up, const float* x, int64_t n_tokens) override {
    const MatmulOut outs[] = {gate, up};
    if (!fuses(n_tokens, x) || !shares_quantization(outs, n_tokens) || gate.w.rows != up.w.rows) {
      Backend::matmul_silu_mul(gate, up, x, n_tokens);
      return;
    }
    throw_if_cancelled();
    LaunchScope silu_key(launch_keys::silu_mul(n_tokens * gate.w.rows));
    matmul_quantized(outs, x, n_tokens, true);
  }

  void rmsnorm(const float* x, const float* weight, float* y, int64_t n_rows, int64_t n, float eps) override {
    LaunchScope scope(launch_keys::rmsnorm(n_rows, n));
    select();
    if (!queue("rmsnorm", x, weight, y, n_rows, n, eps)) return;
    cuda::rmsnorm(x, weight, y, n_rows, n, eps, stream_);
  }

  void add_rmsnorm(float* x, const float* residual, const float* weight, float* y, int64_t n_rows, int64_t n,
                   float eps) override {
    LaunchScope add_key(launch_keys::add(n_rows * n));
    LaunchScope norm_key(launch_keys::rmsnorm(n_rows, n));
    select();
    if (!queue("add_rmsnorm", x, residual, weight, y, n_rows, n, eps)) return;
    cuda::add_rmsnorm(x, residual, weight, y, n_rows, n, eps, stream_);
  }

  void rope(float* x, const int32_t* pos, int64_t n_tokens, int n_heads, int head_dim, const RopeParams& p) override {
    LaunchScope scope(launch_keys::rope(p, n_tokens, n_heads, head_dim));
    if (p.n_rot <= 0 || p.n_rot > head_dim || p.n_rot % 2 != 0 || p.n_rot > kMaxHeadDim)
      throw std::invalid_argument("rope: n_rot must be even and within head_dim");
    check_tokens(n_tokens, "rope");
    select();
    // As the CPU backend computes it, so each angle has the same bits.
    const float theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(p.n_rot));
    if (!queue("rope", x, pos, n_tokens, n_heads, head_dim, p.n_rot, p.freq_base, p.freq_scale, p.neox)) return;
    cuda::rope(x, pos, n_tokens, n_heads, head_dim, p, theta_scale, stream_);
  }

  void rope_kv_store(float* q, float* k, const float* v, const int32_t* pos, int64_t n_tokens, int n_heads,
                     const RopeParams& p, const KvLayerView& kv, const AttnToken* toks) override {
    LaunchScope q_key(launch_keys::rope(p, n_tokens, n_heads, kv.head_dim));
    LaunchScope k_key(launch_keys::rope(p, n_tokens, kv.n_kv_heads, kv.head_dim));
    LaunchScope store_key(launch_keys::kv_store(kv, n_tokens));
    if (p.n_rot <= 0 || p.n_rot > kv.head_dim || p.n_rot % 2 != 0 || p.n_rot > kMaxHeadDim)
      throw std::invalid_argument("rope: n_rot must be even and within head_dim");
    check_tokens(n_tokens, "rope_kv_store");
    select();
    const float theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(p.n_rot));
    if (!queue("rope_kv_store", q, k, v, pos, n_tokens, n_heads, p.n_rot, p.freq_base, p.freq_scale, p.neox, kv.type,
               kv.k, kv.v, kv.block_size, kv.n_kv_heads, kv.head_dim, toks))
      return;
    cuda::rope_kv_store(q, k, v, pos, n_tokens, n_heads, p, theta_scale, kv, toks, stream_);
  }

  void silu_mul(const float* gate, const float* up, float* out, int64_t n) override {
    LaunchScope scope(launch_keys::silu_mul(n));
    select();
    if (!queue("silu_mul", gate, up, out, n)) return;
    cuda::silu_mul(gate, up, out, n, stream_);
  }

  bool can_sample() const override { return true; }

  void sample(const float* logits, int64_t rows, int64_t vocab, const RowSampling* params, int32_t* tokens) override {
    select();
    if (!queue("sample", logits, rows, vocab, params, tokens)) return;
    cuda::sample(logits, rows, vocab, params, tokens, stream_);
  }

  bool has_extra_ops() const override { return true; }

  void gelu_mul(const float* gate, const float* up, float* out, int64_t n) override {
    LaunchScope scope(launch_keys::gelu_mul(n));
    select();
    if (!queue("gelu_mul", gate, up, out, n)) return;
    cuda::gelu_mul(gate, up, out, n, stream_);
  }

  void scale(float* x, float s, int64_t n) override {
    LaunchScope scope(launch_keys::scale(n));
    select();
    if (!queue("scale", x, s, n)) return;
    cuda::scale(x, s, n, stream_);
  }

  void softcap(float* x, float cap, int64_t n) override {
    LaunchScope scope(launch_keys::softcap(n));
    select();
    if (!queue("softcap", x, cap, n)) return;
    cuda::softcap(x, cap, n, stream_);
  }

  void add(float* y, const float* x, int64_t n) override {
    LaunchScope scope(launch_keys::add(n));
    select();
    if (!queue("add", y, x, n)) return;
    cuda::add(y, x, n, stream_);
  }

  // One launch for all rows (the interface's default is a launch per row); the
  // same launch key as the default registers, so warm-up coverage is unchanged.
  void add_rows(float* y, const float* x, int64_t n_rows, int64_t n) override {
    LaunchScope scope(launch_keys::add(n));
    select();
    if (!queue("add_rows", y, x, n_rows, n)) return;
    cuda::add_rows(y, x, n_rows, n, stream_);
  }

  void copy_rows(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t rows,
                 int64_t cols) override {
    LaunchScope scope(launch_keys::copy_rows(rows, cols));
    select();
    if (rows <= 0 || cols <= 0 || !queue("copy_rows", src, src_stride, dst, dst_stride, rows, cols)) return;
    check(cudaMemcpy2DAsync(dst, dst_stride * sizeof(float), src, src_stride * sizeof(float), cols * sizeof(float),
                            rows, cudaMemcpyDeviceToDevice, stream_),
          "copy_rows: cudaMemcpy2DAsync");
  }

  void kv_store(const KvLayerView& kv, const AttnToken* toks, int64_t n_tokens, const float* k,
                const float* v) override {
    LaunchScope scope(launch_keys::kv_store(kv, n_tokens));
    check_tokens(n_tokens, "kv_store");
    select();
    if (!queue("kv_store", kv.type, kv.k, kv.v, kv.block_size, kv.n_kv_heads, kv.head_dim, toks, n_tokens, k, v))
      return;
    cuda::kv_store(kv, toks, n_tokens, k, v, stream_);
  }

  void attention(const KvLayerView& kv, const AttnToken* toks, int64_t n_tokens, int64_t reach_pos, const float* q,
                 int n_heads, float scale, float* out) override {
    attention_extra(kv, toks, n_tokens, reach_pos, q, n_heads, scale, {}, out);
  }

  void attention_extra(const KvLayerView& kv, const AttnToken* toks, int64_t n_tokens, int64_t reach_pos,
                       const float* q, int n_heads, float scale, const AttentionExtras& extras, float* out) override {
    throw_if_cancelled();
    if (n_tokens <= 0) {
      LaunchScope scope(launch_keys::attention(kv, n_heads, n_tokens));
      LaunchScope reach(launch_keys::attention_context(kv, 1));
      return;
    }
    check_tokens(n_tokens, "attention");
    select();
    LaunchScope scope(launch_keys::attention(kv, n_heads, n_tokens));
    LaunchScope reach(launch_keys::attention_context(kv, reach_pos));
    if (kv.n_kv_heads <= 0 || n_heads % kv.n_kv_heads != 0 || kv.head_dim > kMaxHeadDim)
      throw std::invalid_argument("attention: heads not a multiple of kv heads, or head_dim too large");
    if (kv.head_dim % 8 != 0) throw std::invalid_argument("attention: head_dim must be a multiple of 8 on CUDA");
    if (!(extras.softcap >= 0) || extras.window < 0)
      throw std::invalid_argument("attention: negative soft cap or sliding window");
    // A captured step serves every position: it launches every slice a token can have.
    const int64_t reads = mode_ == Mode::Eager ? reach_pos : 0;
    const AttnSplit split = cuda::attention_split(n_tokens, kv.n_kv_heads, reads, sm_count_);
    const int64_t floats = cuda::attention_scratch_floats(n_tokens, n_heads, kv.head_dim, split);
    float* scratch = floats > 0 ? static_cast<float*>(grow(attn_, size_t(floats) * sizeof(float), "attention: scratch"))
                                : nullptr;
    if (!queue("attention", kv.type, kv.k, kv.v, kv.block_size, kv.n_kv_heads, kv.head_dim, toks, n_tokens, q,
               n_heads, scale, extras.softcap, extras.window, out, scratch, split.splits, split.target))
      return;
    cuda::attention(kv, toks, n_tokens, q, n_heads, scale, extras, out, split, scratch, stream_);
  }

 protected:
  void free(void* data) override { release(data); }

 private:
  enum class Mode { Eager, Record, Replay };

  // An upload or zeroing queued by a step being recorded, issued before its graph.
  struct Pending {
    void* dst;
    std::vector<std::byte> data;  // empty: zeroes
    size_t bytes;
  };
  struct Download {
    void* dst;
    const void* src;
    size_t bytes;
  };

  // A captured step in progress; leaving it (or an exception) returns to eager.
  class StepMode {
   public:
    StepMode(CudaBackend& be, Mode m, Graph* g) : be_(be) {
      be_.mode_ = m;
      be_.graph_ = g;
      be_.cursor_ = 0;
      be_.mismatch_ = false;
      be_.recorded_.clear();
      be_.pending_.clear();
      be_.downloads_.clear();
    }
    ~StepMode() {
      be_.mode_ = Mode::Eager;
      be_.graph_ = nullptr;
    }
    StepMode(const StepMode&) = delete;
    StepMode& operator=(const StepMode&) = delete;

   private:
    CudaBackend& be_;
  };

  // Whether a one-token GEMV takes its neighbours' work on this backend (CudaOptions::fuse_one_token).
  bool fuses(int64_t n_tokens, const float* x) const {
    return opts_.fuse_one_token && cuda::fuses_one_token(n_tokens, x);
  }

  // Whether quantized weights of one type and row length, below tensor-core
  // sizes, can share one quantization of x (q, k and v; gate and up).
  bool shares_quantization(std::span<const MatmulOut> outs, int64_t n_tokens) const {
    const WeightView& w0 = outs.front().w;
    bool shared = n_tokens > 0 && is_quantized(w0.type) && !on_tensor_cores(w0, n_tokens);
    for (const MatmulOut& o : outs) shared = shared && o.w.type == w0.type && o.w.cols == w0.cols && o.w.rows > 0;
    return shared;
  }

  // The quantized matmuls of outs on one quantization of x: a quantize_act
  // launch and the GEMV, or (one token) the GEMV alone, which quantizes x
  // itself and, with swiglu, ends in silu(gate) * up.
  void matmul_quantized(std::span<const MatmulOut> outs, const float* x, int64_t n_tokens, bool swiglu) {
    select();
    const WeightView& w0 = outs.front().w;
    for (const MatmulOut& o : outs) check_quantized(o.w);
    const int64_t nb = w0.cols / 32;
    // At least kMinActScratch: a captured decode step's matmuls read rows of
    // different lengths (the model's width, then its FFN's), and a scratch that
    // grew partway through a recording would give its first replay other
    // addresses than the recording's, so the graph would be recorded twice.
    const size_t act_bytes = size_t(n_tokens) * (w0.cols + nb * sizeof(float2));
    auto* q = static_cast<int8_t*>(grow(act_, std::max(act_bytes, kMinActScratch), "matmul: scratch"));
    const QuantAct xq{q, reinterpret_cast<float2*>(q + n_tokens * w0.cols)};
    const cuda::Fuse fuse{fuses(n_tokens, x) ? x : nullptr, swiglu};
    if (!fuse.x && queue("matmul.act", w0.type, w0.cols, x, n_tokens, q))
      cuda::quantize_act(w0.type, x, n_tokens, w0.cols, xq, stream_);
    bool launch = true;
    for (const MatmulOut& o : outs) {
      LaunchScope scope(launch_keys::matmul(o.w, n_tokens));
      launch = queue("matmul.q", o.w.type, o.w.data, o.w.rows, o.w.cols, o.w.row_stride, n_tokens, o.y, q, fuse.x,
                     swiglu);
    }
    if (launch) cuda::matmul_quant(outs, xq, n_tokens, sm_count_, stream_, fuse);
  }

  // One matmul on its own: float weights, or any weight at tensor-core sizes.
  // (A quantized weight below tensor-core sizes goes through matmul_shared alone.)
  void matmul_one(const WeightView& w, const float* x, int64_t n_tokens, float* y) {
    if (is_quantized(w.type) && n_tokens > 0 && w.rows > 0 && !on_tensor_cores(w, n_tokens)) {
      const MatmulOut out{w, y};
      return matmul_shared({&out, 1}, x, n_tokens);
    }
    LaunchScope scope(launch_keys::matmul(w, n_tokens));
    if (n_tokens <= 0 || w.rows <= 0) return;
    select();
    if (is_quantized(w.type)) check_quantized(w);
    if (on_tensor_cores(w, n_tokens)) return matmul_tensor_cores(w, x, n_tokens, y);
    if (!queue("matmul.f", w.type, w.data, w.rows, w.cols, w.row_stride, x, n_tokens, y)) return;
    cuda::matmul_float(w, x, n_tokens, y, stream_);
  }

  static void check_quantized(const WeightView& w) {
    if (w.cols % 32 != 0) throw std::invalid_argument("matmul: quantized row length not a multiple of 32");
    const uintptr_t align = w.type == DType::Q4_1 ? 4 : 2;
    if (reinterpret_cast<uintptr_t>(w.data) % align != 0 || w.row_stride % align != 0)
      throw std::invalid_argument("matmul: quantized weight rows not aligned to their scale type");
  }

  // Eager steps of many tokens go to the tensor cores; captured steps are
  // decode-sized and keep the kernels that match the CPU.
  bool on_tensor_cores(const WeightView& w, int64_t n_tokens) const {
    return mode_ == Mode::Eager && n_tokens >= opts_.tensor_core_from(w.type) && cuda::takes_tensor_cores(w.type);
  }

  // Prefill-sized steps, eager only (captured steps are decode-sized).
  void matmul_tensor_cores(const WeightView& w, const float* x, int64_t n_tokens, float* y) {
    void* scratch = grow(tc_, size_t(cuda::tensor_core_scratch_bytes(w, n_tokens)), "matmul: tensor-core scratch");
    cuda::matmul_tensor_cores(blas_, w, x, n_tokens, y, scratch, stream_);
  }

  static void check_blas_create(cublasStatus_t s) {
    if (s != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(std::string("cublasCreate: ") + cublasGetStatusString(s));
  }

  // A replay launches nothing until run_captured, which has selected the device.
  void select() {
    if (mode_ != Mode::Replay) check(cudaSetDevice(device_), "cudaSetDevice");
  }

  // Whether an op is to be launched now (eager, or recording), after noting its
  // arguments in the signature of the step being recorded or checking them
  // against the one being replayed.
  template <class... A>
  bool queue(const char* op, A... args) {
    if (mode_ == Mode::Eager) return true;
    const uint64_t words[] = {word(op), word(args)...};
    return queue_words(words);
  }
  bool queue_words(std::span<const uint64_t> words) {
    if (mode_ == Mode::Eager) return true;
    const size_t n = words.size();
    if (mode_ == Mode::Record) {
      recorded_.insert(recorded_.end(), words.begin(), words.end());
      return true;
    }
    const auto& want = graph_->signature;
    if (mismatch_ || cursor_ + n > want.size() || !std::equal(words.begin(), words.end(), want.begin() + cursor_))
      mismatch_ = true;
    else
      cursor_ += n;
    return false;
  }

  // Scratch of at least `bytes`: a new allocation when it must grow.
  void* grow(Scratch& s, size_t bytes, const char* what) {
    if (bytes > s.bytes) {
      release(s.data);
      s = Scratch{};
      check(cudaMalloc(&s.data, bytes), what);
      s.bytes = bytes;
    }
    return s.data;
  }

  // Frees device memory, waiting for the device (cudaFree does) so no queued
  // kernel still reads it; memory let go while a step is being recorded stays
  // with that recording, whose kernels may use it. From a destructor too:
  // nothing to throw to.
  void release(void* p) {
    if (p == nullptr) return;
    if (mode_ == Mode::Record) {
      graph_->keep.push_back(p);
      return;
    }
    cudaFree(p);
  }

  void drop(Graph& g) {
    if (g.exec) cudaGraphExecDestroy(g.exec);
    for (void* p : g.keep) cudaFree(p);
    g = Graph{};
  }

  // Records `step` as graph `key` by stream capture (relaxed: a step may allocate),
  // then runs it.
  void record(int64_t key, Graph& g, const std::function<void()>& step) {
    LaunchScope scope(launch_keys::graph_capture(key));
    sync("captured step");  // nothing queued before the recording waits on the graph
    StepMode recording(*this, Mode::Record, &g);
    check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture");
    cudaGraph_t graph = nullptr;
    try {
      step();
    } catch (...) {
      cudaStreamEndCapture(stream_, &graph);
      if (graph) cudaGraphDestroy(graph);
      cudaGetLastError();
      drop(g);
      throw;
    }
    cudaError_t e = cudaStreamEndCapture(stream_, &graph);
    if (e == cudaSuccess) e = cudaGraphInstantiate(&g.exec, graph, 0);
    if (graph) cudaGraphDestroy(graph);
    if (e != cudaSuccess) {
      cudaGetLastError();
      drop(g);
      check(e, "recording a captured step");
    }
    g.signature = std::move(recorded_);
    recorded_.clear();
    for (const Pending& p : pending_)
      check(p.data.empty() ? cudaMemsetAsync(p.dst, 0, p.bytes, stream_)
                           : cudaMemcpyAsync(p.dst, p.data.data(), p.bytes, cudaMemcpyHostToDevice, stream_),
            "captured step: upload");
    launch(g);
  }

  // One launch of the step's graph, its downloads after it, one wait.
  void launch(const Graph& g) {
    check(cudaGraphLaunch(g.exec, stream_), "cudaGraphLaunch");
    for (const Download& d : downloads_)
      check(cudaMemcpyAsync(d.dst, d.src, d.bytes, cudaMemcpyDeviceToHost, stream_), "download: cudaMemcpyAsync");
    sync("captured step");
  }

  // Waits for the stream; a kernel's fault or a bad embedding id surfaces here.
  void sync(const char* what) {
    check(cudaStreamSynchronize(stream_), what);
    if (*bad_id_) {
      *bad_id_ = 0;
      throw std::out_of_range(std::string(what) + ": an earlier get_rows had an id outside its table");
    }
  }

  static void check_tokens(int64_t n, const char* what) {
    if (n > kMaxGridY) throw std::invalid_argument(std::string(what) + ": more than 65535 tokens in one launch");
  }

  int device_;
  CudaOptions opts_;
  cublasHandle_t blas_ = nullptr;
  std::string name_;
  int sm_count_ = 1;
  cudaStream_t stream_ = nullptr;
  int* bad_id_ = nullptr;
  Scratch act_, attn_, tc_;

  // Captured steps by key, and the one being recorded or replayed.
  std::map<int64_t, Graph> graphs_;
  Mode mode_ = Mode::Eager;
  Graph* graph_ = nullptr;
  std::vector<uint64_t> recorded_;  // the signature being recorded
  size_t cursor_ = 0;               // replay: words of the signature matched so far
  bool mismatch_ = false;
  std::vector<Pending> pending_;
  std::vector<Download> downloads_;
};

}  // namespace
}  // namespace cuda

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

std::unique_ptr<Backend> make_cuda_backend(int device, CudaOptions opts) {
  return std::make_unique<cuda::CudaBackend>(device, opts);
}

}  // namespace inferd::kernels
