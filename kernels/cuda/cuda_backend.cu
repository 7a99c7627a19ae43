// The CUDA backend: memory, argument checks and launch keys (the same keys the
// CPU backend registers, so warm-up covers both), then the launchers of
// cuda_ops.hpp on the backend's stream.
#include "kernels/cuda/cuda_backend.hpp"

#include <cuda_runtime.h>

#include <cmath>
#include <new>
#include <stdexcept>
#include <string>

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

bool is_quantized(DType t) { return t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q8_0; }

// Device memory that only grows, for per-launch intermediates. Freeing waits
// for the device (cudaFree does), so no queued kernel still reads the old one.
class Scratch {
 public:
  ~Scratch() { cudaFree(data_); }
  void* get(size_t bytes, const char* what) {
    if (bytes > bytes_) {
      check(cudaFree(data_), what);
      data_ = nullptr;
      bytes_ = 0;
      check(cudaMalloc(&data_, bytes), what);
      bytes_ = bytes;
    }
    return data_;
  }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {
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
  }
  ~CudaBackend() override {
    cudaStreamSynchronize(stream_);
    cudaFreeHost(bad_id_);
    cudaStreamDestroy(stream_);
  }

  std::string name() const override { return name_; }
  int threads() const override { return 1; }  // host threads: the ops only queue work

  bool host_visible() const override { return false; }

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
    if (zeroed) check(cudaMemsetAsync(p, 0, rounded, stream_), "cudaMemsetAsync");
    return buf;
  }

  void upload(void* dst, const void* src, size_t bytes) override {
    select();
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "upload: cudaMemcpyAsync");
    sync("upload");
  }

  void download(void* dst, const void* src, size_t bytes) override {
    select();
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "download: cudaMemcpyAsync");
    sync("download");
  }

  void get_rows(const WeightView& table, const int32_t* ids, int64_t n, float* out) override {
    LaunchScope scope(launch_keys::get_rows(table, n));
    check_tokens(n, "get_rows");
    select();
    cuda::get_rows(table, ids, n, out, bad_id_, stream_);
  }

  void matmul(const WeightView& w, const float* x, int64_t n_tokens, float* y) override {
    throw_if_cancelled();
    LaunchScope scope(launch_keys::matmul(w, n_tokens));
    if (n_tokens <= 0 || w.rows <= 0) return;
    select();
    if (!is_quantized(w.type)) return cuda::matmul_float(w, x, n_tokens, y, stream_);
    if (w.cols % 32 != 0) throw std::invalid_argument("matmul: quantized row length not a multiple of 32");
    const uintptr_t align = w.type == DType::Q4_1 ? 4 : 2;
    if (reinterpret_cast<uintptr_t>(w.data) % align != 0 || w.row_stride % align != 0)
      throw std::invalid_argument("matmul: quantized weight rows not aligned to their scale type");
    const int64_t nb = w.cols / 32;
    auto* q = static_cast<int8_t*>(act_.get(size_t(n_tokens) * (w.cols + nb * sizeof(float2)), "matmul: scratch"));
    const QuantAct xq{q, reinterpret_cast<float2*>(q + n_tokens * w.cols)};
    cuda::quantize_act(w.type, x, n_tokens, w.cols, xq, stream_);
    cuda::matmul_quant(w, xq, n_tokens, y, stream_);
  }

  void rmsnorm(const float* x, const float* weight, float* y, int64_t n_rows, int64_t n, float eps) override {
    LaunchScope scope(launch_keys::rmsnorm(n_rows, n));
    select();
    cuda::rmsnorm(x, weight, y, n_rows, n, eps, stream_);
  }

  void rope(float* x, const int32_t* pos, int64_t n_tokens, int n_heads, int head_dim, const RopeParams& p) override {
    LaunchScope scope(launch_keys::rope(p, n_tokens, n_heads, head_dim));
    if (p.n_rot <= 0 || p.n_rot > head_dim || p.n_rot % 2 != 0 || p.n_rot > kMaxHeadDim)
      throw std::invalid_argument("rope: n_rot must be even and within head_dim");
    check_tokens(n_tokens, "rope");
    select();
    // As the CPU backend computes it, so each angle has the same bits.
    const float theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(p.n_rot));
    cuda::rope(x, pos, n_tokens, n_heads, head_dim, p, theta_scale, stream_);
  }

  void silu_mul(const float* gate, const float* up, float* out, int64_t n) override {
    LaunchScope scope(launch_keys::silu_mul(n));
    select();
    cuda::silu_mul(gate, up, out, n, stream_);
  }

  void add(float* y, const float* x, int64_t n) override {
    LaunchScope scope(launch_keys::add(n));
    select();
    cuda::add(y, x, n, stream_);
  }

  void kv_store(const KvLayerView& kv, const AttnToken* toks, int64_t n_tokens, const float* k,
                const float* v) override {
    LaunchScope scope(launch_keys::kv_store(kv, n_tokens));
    check_tokens(n_tokens, "kv_store");
    select();
    cuda::kv_store(kv, toks, n_tokens, k, v, stream_);
  }

  void attention(const KvLayerView& kv, const AttnToken* toks, int64_t n_tokens, int64_t reach_pos, const float* q,
                 int n_heads, float scale, float* out) override {
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
    const AttnSplit split = cuda::attention_split(n_tokens, kv.n_kv_heads, reach_pos, sm_count_);
    const int64_t floats = cuda::attention_scratch_floats(n_tokens, n_heads, kv.head_dim, split);
    float* scratch = floats > 0 ? static_cast<float*>(attn_.get(size_t(floats) * sizeof(float), "attention: scratch"))
                                : nullptr;
    cuda::attention(kv, toks, n_tokens, q, n_heads, scale, out, split, scratch, stream_);
  }

 protected:
  void free(void* data) override { cudaFree(data); }  // from a destructor: nothing to throw to

 private:
  void select() { check(cudaSetDevice(device_), "cudaSetDevice"); }

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
  std::string name_;
  int sm_count_ = 1;
  cudaStream_t stream_ = nullptr;
  int* bad_id_ = nullptr;
  Scratch act_, attn_;
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

std::unique_ptr<Backend> make_cuda_backend(int device) { return std::make_unique<cuda::CudaBackend>(device); }

}  // namespace inferd::kernels
