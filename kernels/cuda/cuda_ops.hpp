// The kernel launchers behind the CUDA backend (cuda_backend.cu): each queues
// its kernels on `stream` and returns. Pointers are device memory; the backend
// has validated shapes and registered launch keys before calling.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <span>

#include "kernels/backend.hpp"

namespace inferd::kernels::cuda {

// Throws std::runtime_error("<what>: <CUDA's message>") when e is not cudaSuccess.
void check(cudaError_t e, const char* what);
// check() of the last launch error, for the call just made.
inline void check_launch(const char* what) { check(cudaGetLastError(), what); }

// Activations quantized to int8 in blocks of 32 for a matmul against quantized
// weights, bit for bit as the CPU backend does it (kernels/cpu/kernel_table.hpp,
// ActTile): q is [n_tokens][cols]; dc[t * nb + b] = {d, c} of token t's block b.
struct QuantAct {
  int8_t* q;
  float2* dc;
};

void quantize_act(DType weight, const float* x, int64_t n_tokens, int64_t cols, QuantAct out, cudaStream_t stream);
// y[t][r] = row r of w . token t, from the quantized activations (Q4_0, Q4_1, Q8_0),
// for each output; all weights of one type and row length (decode sizes: one launch).
// What a one-token GEMV may take over from the kernels beside it (fuses_one_token
// says when it can): with x set, it quantizes those floats itself, so the
// QuantAct is not read and no quantize_act runs before it; with swiglu, outs are
// {gate, up} of the same rows and it writes silu(gate) * up into gate's y (up's y
// is not written), so no silu_mul runs after it; swiglu only with x.
struct Fuse {
  const float* x = nullptr;
  bool swiglu = false;
};
// Whether matmul_quant can take a Fuse for a step of n_tokens from x at this address.
bool fuses_one_token(int64_t n_tokens, const float* x);
void matmul_quant(std::span<const MatmulOut> outs, QuantAct x, int64_t n_tokens, int sm_count, cudaStream_t stream,
                  Fuse fuse = {});
// The same for F32, F16 and BF16 weights, from the float activations.
void matmul_float(const WeightView& w, const float* x, int64_t n_tokens, float* y, cudaStream_t stream);

// Tensor-core matmul (matmul_tc.cu) for steps of many tokens: whether it takes
// the weight type, the scratch it needs (device bytes, 256-byte aligned), and
// the matmul itself, which rounds x to halves and runs cuBLAS on `stream`.
bool takes_tensor_cores(DType t);
int64_t tensor_core_slab_rows(int64_t cols);
int64_t tensor_core_scratch_bytes(const WeightView& w, int64_t n_tokens);
void matmul_tensor_cores(cublasHandle_t blas, const WeightView& w, const float* x, int64_t n_tokens, float* y,
                         void* scratch, cudaStream_t stream);

// Rows out of range are written as zeros and set *bad_id (host-mapped memory) to 1.
void get_rows(const WeightView& table, const int32_t* ids, int64_t n, float* out, int* bad_id, cudaStream_t stream);
void rmsnorm(const float* x, const float* weight, float* y, int64_t n_rows, int64_t n, float eps, cudaStream_t stream);
// x += residual, then y = rmsnorm(x) * weight, in one kernel; y may be residual.
void add_rmsnorm(float* x, const float* residual, const float* weight, float* y, int64_t n_rows, int64_t n, float eps,
                 cudaStream_t stream);
// theta_scale = freq_base^(-2 / n_rot), computed by the caller as the CPU backend does.
void rope(float* x, const int32_t* pos, int64_t n_tokens, int n_heads, int head_dim, const RopeParams& p,
          float theta_scale, cudaStream_t stream);
// rope of q ([n_tokens][n_heads][kv.head_dim]) and of k in place, then kv_store
// of k and v, in one kernel with the same arithmetic as rope then kv_store.
void rope_kv_store(float* q, float* k, const float* v, const int32_t* pos, int64_t n_tokens, int n_heads,
                   const RopeParams& p, float theta_scale, const KvLayerView& kv, const AttnToken* toks,
                   cudaStream_t stream);
void silu_mul(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream);
// Gemma's ops: gelu(gate) * up (tanh approximation), x *= s, x = cap * tanh(x / cap).
void gelu_mul(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream);
void scale(float* x, float s, int64_t n, cudaStream_t stream);
void softcap(float* x, float cap, int64_t n, cudaStream_t stream);
void add(float* y, const float* x, int64_t n, cudaStream_t stream);
// tokens[r] = the token sampled from row r of logits ([rows][vocab]) as params[r] says (sampling.cu).
void sample(const float* logits, int64_t rows, int64_t vocab, const RowSampling* params, int32_t* tokens,
            cudaStream_t stream);
void add_rows(float* y, const float* x, int64_t n_rows, int64_t n, cudaStream_t stream);
void kv_store(const KvLayerView& kv, const AttnToken* toks, int64_t n_tokens, const float* k, const float* v,
              cudaStream_t stream);

// How attention splits each (token, kv head)'s positions over blocks (flash
// decoding). A token at position p reads its p + 1 positions in slices of
// max(128, ceil((p + 1) / target) rounded up to 128): at most `target` slices,
// however long the context. `splits` slices are launched per token; those past
// a token's context are empty. A token's slicing depends only on its position and
// on `target`, which depends only on the step's token bucket, so a step gives the
// same bits whether it is launched for its own reach or for every position (a
// captured step, replayed at any context length).
struct AttnSplit {
  int target = 1;
  int splits = 1;
};
// The split for a step of n_tokens whose longest context is `reach`; reach <= 0:
// for any context (splits = target).
AttnSplit attention_split(int64_t n_tokens, int n_kv_heads, int64_t reach, int sm_count);
// Floats of scratch attention needs for that split (0 when unsplit).
int64_t attention_scratch_floats(int64_t n_tokens, int n_heads, int head_dim, AttnSplit split);
void attention(const KvLayerView& kv, const AttnToken* toks, int64_t n_tokens, const float* q, int n_heads,
               float scale, const AttentionExtras& extras, float* out, AttnSplit split, float* scratch,
               cudaStream_t stream);

}  // namespace inferd::kernels::cuda
