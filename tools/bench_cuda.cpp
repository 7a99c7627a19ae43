// Not a test: times the CUDA backend's matmul and decode attention and prints
// one JSON object.
// Decode (GEMV) rows report weight bytes read per second against the device's
// copy bandwidth (the roofline a GEMV can reach, measured here as a large
// device-to-device copy); prefill rows report GFLOP/s. Weights rotate over
// several copies so that their bytes are far larger than the L2 cache.
// Attention rows report K and V bytes read per second; each call includes the
// backend's read-back of the token array (see cuda_backend.cu).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/quantize.hpp"

using namespace inferd::kernels;

namespace {

// INFERD_BENCH_REPS: calls timed per row (a profiler run wants few).
const int reps_override = [] {
  const char* e = std::getenv("INFERD_BENCH_REPS");
  return e ? std::atoi(e) : 0;
}();

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// Device-to-device copy bandwidth, counting bytes read and written.
double copy_gbps() {
  const size_t bytes = size_t(2) << 30;
  void *a = nullptr, *b = nullptr;
  check(cudaMalloc(&a, bytes), "cudaMalloc");
  check(cudaMalloc(&b, bytes), "cudaMalloc");
  check(cudaMemset(a, 1, bytes), "cudaMemset");
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  check(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice), "cudaMemcpy");
  const int reps = 10;
  cudaEventRecord(e0);
  for (int i = 0; i < reps; ++i) cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
  cudaEventRecord(e1);
  check(cudaEventSynchronize(e1), "cudaEventSynchronize");
  float ms = 0;
  cudaEventElapsedTime(&ms, e0, e1);
  cudaFree(a);
  cudaFree(b);
  return 2.0 * bytes * reps / (ms * 1e-3) / 1e9;
}

// Decode attention over an f16 paged cache: per step, each sequence's query
// (32 heads, 8 kv heads of 128) reads its whole context of K and V.
void bench_attention(Backend& be, double roofline) {
  const int n_kv = 8, hd = 128, n_heads = 32, bs = 16;
  std::printf(",\n\"attention\": [\n");
  bool first = true;
  for (int ctx : {1024, 4096, 16384}) {
    for (int n_seqs : {1, 8}) {
      const int blocks_per_seq = ctx / bs;
      const size_t slot_bytes = size_t(n_kv) * hd * 2, bytes = size_t(n_seqs) * ctx * slot_bytes;
      Buffer k = be.alloc(bytes), v = be.alloc(bytes);
      // Random halves in [-1, 1) (not zeros), one pattern repeated over the cache.
      std::vector<uint16_t> pattern(1 << 20);
      std::mt19937 rng(5);
      for (auto& h : pattern) h = static_cast<uint16_t>(0x3800 + rng() % 0x400) | (rng() % 2 ? 0x8000 : 0);
      for (size_t off = 0; off < bytes; off += pattern.size() * 2) {
        const size_t n = std::min(bytes - off, pattern.size() * 2);
        be.upload(k.as<uint8_t>() + off, pattern.data(), n);
        be.upload(v.as<uint8_t>() + off, pattern.data(), n);
      }
      std::vector<int32_t> tables(size_t(n_seqs) * blocks_per_seq);
      for (size_t i = 0; i < tables.size(); ++i) tables[i] = static_cast<int32_t>(i);
      Buffer dt = be.alloc(tables.size() * 4);
      be.upload(dt.data(), tables.data(), tables.size() * 4);
      std::vector<AttnToken> toks(n_seqs);
      for (int s = 0; s < n_seqs; ++s) toks[s] = {dt.as<int32_t>() + s * blocks_per_seq, ctx - 1};
      Buffer dtoks = be.alloc(toks.size() * sizeof(AttnToken));
      be.upload(dtoks.data(), toks.data(), toks.size() * sizeof(AttnToken));
      std::vector<float> q(size_t(n_seqs) * n_heads * hd);
      std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
      for (auto& x : q) x = dist(rng);
      Buffer dq = be.alloc(q.size() * 4), out = be.alloc(q.size() * 4);
      be.upload(dq.data(), q.data(), q.size() * 4);
      const KvLayerView kv{DType::F16, k.data(), v.data(), bs, n_kv, hd};
      auto run = [&](int reps) {
        for (int i = 0; i < reps; ++i)
          be.attention(kv, dtoks.as<AttnToken>(), n_seqs, ctx, dq.as<float>(), n_heads, 0.088f, out.as<float>());
        float probe;
        be.download(&probe, out.data(), sizeof(float));
      };
      run(2);
      const int reps = reps_override > 0 ? reps_override : 100;
      const auto t0 = std::chrono::steady_clock::now();
      run(reps);
      const double s = seconds_since(t0) / reps, gbps = 2.0 * bytes / s / 1e9;
      std::printf("%s  {\"context\": %d, \"sequences\": %d, \"us\": %.1f, \"kv_GBps\": %.0f, \"of_copy_bw\": %.2f}",
                  first ? "" : ",\n", ctx, n_seqs, s * 1e6, gbps, gbps / roofline);
      first = false;
    }
  }
  std::printf("\n]");
}

// "a,b,c" -> {"a", "b", "c"}.
std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  for (size_t at = 0; at <= text.size();) {
    const size_t end = std::min(text.find(',', at), text.size());
    out.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

// "4096x14336,8192" -> {{4096, 14336}, {8192, 8192}} (rows x cols).
std::vector<std::pair<int64_t, int64_t>> parse_shapes(const std::string& text) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const std::string& item : split_commas(text)) {
    const size_t x = item.find('x');
    const int64_t rows = std::stoll(item.substr(0, x));
    out.emplace_back(rows, x == std::string::npos ? rows : std::stoll(item.substr(x + 1)));
  }
  return out;
}

}  // namespace

// bench_cuda [--shapes ROWSxCOLS,...] [--types q4_0,f16,...] [--tokens 1,2,...] [--no-attention]
int main(int argc, char** argv) {
  std::vector<std::pair<int64_t, int64_t>> shapes = {{8192, 8192}};
  const std::vector<DType> all_types = {DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::F16, DType::BF16, DType::F32};
  std::vector<DType> types = all_types;
  std::vector<int64_t> token_counts = {1, 2, 4, 8, 16, 32, 64, 128, 512};
  bool attention = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const std::string value = i + 1 < argc ? argv[i + 1] : "";
    if (a == "--shapes") {
      shapes = parse_shapes(value), ++i;
    } else if (a == "--tokens") {
      token_counts.clear();
      for (const std::string& n : split_commas(value)) token_counts.push_back(std::stoll(n));
      ++i;
    } else if (a == "--no-attention") {
      attention = false;
    } else if (a == "--types") {
      types.clear();
      for (const std::string& name : split_commas(value)) {
        bool known = false;
        for (DType t : all_types)
          if (traits(t).name == name) types.push_back(t), known = true;
        if (!known) {
          std::fprintf(stderr, "bench_cuda: unknown type %s\n", name.c_str());
          return 2;
        }
      }
      ++i;
    } else {
      std::fprintf(stderr, "usage: bench_cuda [--shapes ROWSxCOLS,...] [--types q4_0,...] [--tokens 1,2,...] "
                           "[--no-attention]\n");
      return 2;
    }
  }
  Backend& be = *make_cuda_backend(0).release();
  // The same kernels without the tensor cores, for the steps that would use them.
  constexpr CudaOptions kNoTensorCores{.tensor_core_min_tokens = INT64_MAX, .quantized_tensor_core_min_tokens = INT64_MAX};
  Backend& cores = *make_cuda_backend(0, kNoTensorCores).release();
  const double roofline = copy_gbps();
  std::printf(
      "{\"device\": \"%s\", \"copy_GBps\": %.0f, \"tensor_core_min_tokens\": %lld, "
      "\"quantized_tensor_core_min_tokens\": %lld, \"matmul\": [\n",
      be.name().c_str(), roofline, (long long)CudaOptions{}.tensor_core_min_tokens,
      (long long)CudaOptions{}.quantized_tensor_core_min_tokens);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  bool first = true;
  for (const auto& [rows, cols] : shapes)
  for (DType t : types) {
    std::vector<float> src(cols);
    for (auto& v : src) v = dist(rng);
    const size_t rb = row_bytes(t, cols), bytes = rb * rows;
    std::vector<uint8_t> host(bytes);
    for (int64_t r = 0; r < rows; ++r) quantize_row(t, src.data(), host.data() + r * rb, cols);
    // Enough copies to hold at least 1 GiB, so the L2 (60 MB on an H200) never holds them.
    const int copies = static_cast<int>(std::max<size_t>(2, (size_t(1) << 30) / bytes));
    std::vector<Buffer> ws;
    for (int i = 0; i < copies; ++i) {
      ws.push_back(be.alloc(bytes));
      be.upload(ws.back().data(), host.data(), bytes);
    }
    for (int64_t n : token_counts) {
      std::vector<float> x(n * cols);
      for (auto& v : x) v = dist(rng);
      Buffer dx = be.alloc(x.size() * sizeof(float)), dy = be.alloc(n * rows * sizeof(float));
      be.upload(dx.data(), x.data(), x.size() * sizeof(float));
      check(cudaDeviceSynchronize(), "uploads");  // the other backend runs on its own stream
      const bool tc = n >= CudaOptions{}.tensor_core_from(t) && t != DType::F32;
      for (Backend* b : {&be, &cores}) {
        if (b == &cores && !tc) continue;  // the same kernels as the first row
        auto run = [&](int reps) {
          for (int i = 0; i < reps; ++i) {
            const WeightView w{t, ws[i % copies].data(), rows, cols, rb};
            b->matmul(w, dx.as<float>(), n, dy.as<float>());
          }
          float probe;
          b->download(&probe, dy.data(), sizeof(float));  // waits for the queue
        };
        run(2);  // warm-up
        const int reps = reps_override > 0 ? reps_override : n >= 128 ? 20 : 200;
        const auto t0 = std::chrono::steady_clock::now();
        run(reps);
        const double s = seconds_since(t0) / reps;
        const double gbps = bytes / s / 1e9, gflops = 2.0 * rows * cols * n / s / 1e9;
        const char* path = b == &be && tc ? "tensor_cores" : n <= 8 ? "gemv" : "tiled";
        std::printf("%s  {\"type\": \"%s\", \"path\": \"%s\", \"rows\": %lld, \"cols\": %lld, \"tokens\": %lld, "
                    "\"us\": %.1f, \"weight_GBps\": %.0f, \"of_copy_bw\": %.2f, \"GFLOPs\": %.0f}",
                    first ? "" : ",\n", std::string(traits(t).name).c_str(), path, (long long)rows, (long long)cols,
                    (long long)n, s * 1e6, gbps, gbps / roofline, gflops);
        first = false;
      }
    }
  }
  std::printf("\n]");
  if (attention) bench_attention(be, roofline);
  std::printf("}\n");
  return 0;
}
