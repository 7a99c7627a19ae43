// The shape key of every op of the Backend interface, in one place: each backend's
// launch sites register these keys, and the shape tracer (shape_tracer.hpp) computes
// them without running anything, so warm-up can know the reachable set up front.
//
// Each key depends on one step axis only: the step's token count, or the context
// reached, never their product. That keeps the reachable set the union of the
// axes' buckets, which a warm-up plan can cover with real requests.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include "kernels/backend.hpp"

namespace inferd::kernels::launch_keys {

inline const char* by_type(DType t, const char* what, const char* f32, const char* f16, const char* bf16,
                           const char* q4_0, const char* q4_1, const char* q8_0) {
  switch (t) {
    case DType::F32: return f32;
    case DType::F16: return f16;
    case DType::BF16: return bf16;
    case DType::Q4_0: return q4_0;
    case DType::Q4_1: return q4_1;
    case DType::Q8_0: return q8_0;
    default: break;
  }
  // The types with no key of their own in the callers' lists.
  switch (t) {
    case DType::Q5_0: return std::string_view(what) == "matmul" ? "matmul.q5_0" : "get_rows.q5_0";
    case DType::Q5_1: return std::string_view(what) == "matmul" ? "matmul.q5_1" : "get_rows.q5_1";
    case DType::Q4_K: return std::string_view(what) == "matmul" ? "matmul.q4_k" : "get_rows.q4_k";
    case DType::Q5_K: return std::string_view(what) == "matmul" ? "matmul.q5_k" : "get_rows.q5_k";
    case DType::Q6_K: return std::string_view(what) == "matmul" ? "matmul.q6_k" : "get_rows.q6_k";
    default: break;
  }
  throw std::invalid_argument(std::string(what) + ": unsupported type " + std::string(traits(t).name));
}

inline const char* kv_op(DType t, const char* f16, const char* f32) {
  if (t == DType::F16) return f16;
  if (t == DType::F32) return f32;
  throw std::invalid_argument("kv cache type must be f16 or f32, not " + std::string(traits(t).name));
}

inline LaunchKey get_rows(const WeightView& table, int64_t n) {
  if (table.type == DType::Q8_1) return {"get_rows.q8_1", "k,t", {table.cols, pow2_bucket(n)}};
  return {by_type(table.type, "get_rows", "get_rows.f32", "get_rows.f16", "get_rows.bf16", "get_rows.q4_0",
                  "get_rows.q4_1", "get_rows.q8_0"),
          "k,t", {table.cols, pow2_bucket(n)}};
}

inline LaunchKey matmul(const WeightView& w, int64_t n_tokens) {
  return {by_type(w.type, "matmul", "matmul.f32", "matmul.f16", "matmul.bf16", "matmul.q4_0", "matmul.q4_1",
                  "matmul.q8_0"),
          "n,k,t", {w.rows, w.cols, pow2_bucket(n_tokens)}};
}

inline LaunchKey matmul_scaled(const ScaledWeightView& w, int64_t n_tokens) {
  return {w.format == ScaledFormat::Mxfp4 ? "matmul.mxfp4" : "matmul.fp8_block", "n,k,t",
          {w.rows, w.cols, pow2_bucket(n_tokens)}};
}

inline LaunchKey moe_route(const MoeRouting& r, int64_t n_tokens) {
  return {r.tid2eid ? "moe_route.hash" : "moe_route", "e,k,t", {r.n_experts, r.top_k, pow2_bucket(n_tokens)}};
}

inline LaunchKey moe_experts(int64_t n_experts, int top_k, int64_t n_tokens) {
  return {"moe_experts", "e,k,t", {n_experts, top_k, pow2_bucket(n_tokens)}};
}

inline LaunchKey rmsnorm(int64_t n_rows, int64_t n) { return {"rmsnorm", "n,t", {n, pow2_bucket(n_rows)}}; }

inline LaunchKey rope(const RopeParams& p, int64_t n_tokens, int n_heads, int head_dim) {
  return {p.neox ? "rope.neox" : "rope.norm", "h,d,t", {n_heads, head_dim, pow2_bucket(n_tokens)}};
}

inline LaunchKey silu_mul(int64_t n) { return {"silu_mul", "n", {pow2_bucket(n)}}; }
inline LaunchKey add(int64_t n) { return {"add", "n", {pow2_bucket(n)}}; }
inline LaunchKey gelu_mul(int64_t n) { return {"gelu_mul", "n", {pow2_bucket(n)}}; }
inline LaunchKey scale(int64_t n) { return {"scale", "n", {pow2_bucket(n)}}; }
inline LaunchKey softcap(int64_t n) { return {"softcap", "n", {pow2_bucket(n)}}; }
inline LaunchKey copy_rows(int64_t rows, int64_t cols) { return {"copy_rows", "k,t", {cols, pow2_bucket(rows)}}; }

inline LaunchKey kv_store(const KvLayerView& kv, int64_t n_tokens) {
  return {kv_op(kv.type, "kv_store.f16", "kv_store.f32"), "kvh,d,t",
          {kv.n_kv_heads, kv.head_dim, pow2_bucket(n_tokens)}};
}

// Attention registers two keys per launch: the step's token bucket (how the work
// is tiled) and the context bucket (how far back it reads, which decides how a
// long context is split).
inline LaunchKey attention(const KvLayerView& kv, int n_heads, int64_t n_tokens) {
  return {kv_op(kv.type, "attention.f16", "attention.f32"), "h,d,t", {n_heads, kv.head_dim, pow2_bucket(n_tokens)}};
}

inline LaunchKey attention_context(const KvLayerView& kv, int64_t context) {
  return {kv_op(kv.type, "attention.f16.ctx", "attention.f32.ctx"), "kvh,d,ctx",
          {kv.n_kv_heads, kv.head_dim, pow2_bucket(context)}};
}

// A captured decode step of `batch` rows (a graph size, not bucketed further):
// its recording, and its replays. Warm-up needs both of each size it can reach.
inline LaunchKey graph_capture(int64_t batch) { return {"graph.capture", "b", {batch}}; }
inline LaunchKey graph_replay(int64_t batch) { return {"graph.replay", "b", {batch}}; }

// The largest position + 1 over a step's tokens: the context its attention reads.
inline int64_t attention_reach(const AttnToken* toks, int64_t n_tokens) {
  int32_t max_pos = 0;
  for (int64_t t = 0; t < n_tokens; ++t) max_pos = toks[t].pos > max_pos ? toks[t].pos : max_pos;
  return int64_t(max_pos) + 1;
}

}  // namespace inferd::kernels::launch_keys
