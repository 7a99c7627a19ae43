#include "kernels/shape_tracer.hpp"

#include "kernels/host_memory.hpp"
#include "kernels/launch_keys.hpp"

namespace inferd::kernels {
namespace {

class ShapeTracer final : public Backend {
 public:
  explicit ShapeTracer(ShapeRegistry& reg) : reg_(reg) {}

  std::string name() const override { return "shape-tracer"; }
  int threads() const override { return 1; }

  // Host memory, so a dry run needs no device; ops never read or write it.
  bool host_visible() const override { return true; }
  Buffer alloc(size_t bytes, bool zeroed) override { return Buffer(this, host_alloc(bytes, zeroed), bytes); }
  void upload(void*, const void*, size_t) override {}
  void download(void*, const void*, size_t) override {}

  void get_rows(const WeightView& table, const int32_t*, int64_t n, float*) override {
    record(launch_keys::get_rows(table, n));
  }
  void matmul(const WeightView& w, const float*, int64_t n_tokens, float*) override {
    record(launch_keys::matmul(w, n_tokens));
  }
  bool takes_scaled_format(ScaledFormat) const override { return true; }
  void matmul_scaled(const ScaledWeightView& w, const float*, int64_t n_tokens, float*) override {
    record(launch_keys::matmul_scaled(w, n_tokens));
  }
  void moe_route(const MoeRouting& r, const float*, int64_t n_tokens, const int32_t*, int32_t*, float*) override {
    record(launch_keys::moe_route(r, n_tokens));
  }
  void moe_experts(std::span<const ExpertWeights> experts, float, const float*, int64_t n_tokens, int top_k,
                   const int32_t*, const float*, float*) override {
    record(launch_keys::moe_experts(static_cast<int64_t>(experts.size()), top_k, n_tokens));
  }
  void rmsnorm(const float*, const float*, float*, int64_t n_rows, int64_t n, float) override {
    record(launch_keys::rmsnorm(n_rows, n));
  }
  void rope(float*, const int32_t*, int64_t n_tokens, int n_heads, int head_dim, const RopeParams& p) override {
    record(launch_keys::rope(p, n_tokens, n_heads, head_dim));
  }
  void silu_mul(const float*, const float*, float*, int64_t n) override { record(launch_keys::silu_mul(n)); }
  void add(float*, const float*, int64_t n) override { record(launch_keys::add(n)); }
  bool has_extra_ops() const override { return true; }
  void gelu_mul(const float*, const float*, float*, int64_t n) override { record(launch_keys::gelu_mul(n)); }
  void scale(float*, float, int64_t n) override { record(launch_keys::scale(n)); }
  void softcap(float*, float, int64_t n) override { record(launch_keys::softcap(n)); }
  void copy_rows(const float*, int64_t, float*, int64_t, int64_t rows, int64_t cols) override {
    record(launch_keys::copy_rows(rows, cols));
  }
  void kv_store(const KvLayerView& kv, const AttnToken*, int64_t n_tokens, const float*, const float*) override {
    record(launch_keys::kv_store(kv, n_tokens));
  }
  void attention(const KvLayerView& kv, const AttnToken*, int64_t n_tokens, int64_t reach, const float*, int n_heads,
                 float, float*) override {
    record(launch_keys::attention(kv, n_heads, n_tokens));
    record(launch_keys::attention_context(kv, reach));
  }
  void attention_extra(const KvLayerView& kv, const AttnToken* toks, int64_t n_tokens, int64_t reach, const float* q,
                       int n_heads, float scale, const AttentionExtras&, float* out) override {
    attention(kv, toks, n_tokens, reach, q, n_heads, scale, out);
  }

 protected:
  void free(void* data) override { host_free(data); }

 private:
  void record(const LaunchKey& k) { reg_.touch(k.key(), 0.0); }
  ShapeRegistry& reg_;
};

}  // namespace

std::unique_ptr<Backend> make_shape_tracer(ShapeRegistry& reg) { return std::make_unique<ShapeTracer>(reg); }

}  // namespace inferd::kernels
