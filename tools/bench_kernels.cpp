// Microbenchmark of the CPU kernels on the default model's shapes (SmolLM2-135M),
// for each instruction set the CPU has: matvec (one token, decode) in GB/s of
// weights read next to the machine's read bandwidth, batched matmul (8 tokens:
// batched decode; 128 tokens: prefill) in GFLOP/s, plus the cost of a
// thread-pool dispatch and of a shape-key touch.
// Then attention through the backend, and each op of the kernel tables on its
// own (one thread): attention's scores / softmax / values over a long context,
// the elementwise ops and the activation quantization, per instruction set.
// Then DeepSeek-V4-Flash's FP8 block-scaled and MXFP4 weights (matmul_scaled):
// one token in GB/s of weight read, 8 tokens in GFLOP/s.
// Usage: bench_kernels [seconds per measurement, default 0.5] [--cpu-time] [--ops] [--scaled]
// --cpu-time times the calling thread's CPU time instead of wall time and runs
// one thread only: numbers that hold on a machine busy with other work.
// --ops skips the matmul tables (attention and the per-op table only).
// --scaled runs the read bandwidth and the scaled-weight table only.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <time.h>

#include "kernels/backend.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/cpu/kernel_table.hpp"
#include "kernels/half.hpp"
#include "kernels/quantize.hpp"
#include "kernels/thread_pool.hpp"

using namespace inferd::kernels;
using Clock = std::chrono::steady_clock;

namespace {

double g_seconds = 0.5;
bool g_cpu_time = false;

double now_s() {
  if (!g_cpu_time) return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Runs fn for about g_seconds (at least 3 calls); returns the fastest call's
// seconds: the machine's other work only ever adds time, so the minimum is the
// steadiest estimate of the kernel's own cost.
template <class Fn>
double time_per_call(Fn&& fn) {
  fn();  // warm: first-use registration, page faults
  std::vector<double> times;
  const auto start = Clock::now();
  while (times.size() < 3 || std::chrono::duration<double>(Clock::now() - start).count() < g_seconds) {
    const double t0 = now_s();
    fn();
    const double t = now_s() - t0;
    if (t > 0) times.push_back(t);  // the VM's thread clock rarely reads a call as 0
  }
  return *std::min_element(times.begin(), times.end());
}

// time_per_call for calls too short to time one by one: batches of calls that
// take about 20 us, divided back.
template <class Fn>
double time_short_call(Fn&& fn) {
  const double t0 = now_s();
  fn();
  const double once = std::max(now_s() - t0, 1e-9);
  const int reps = static_cast<int>(std::clamp(2e-5 / once, 1.0, 1e5));
  return time_per_call([&] {
    for (int i = 0; i < reps; ++i) fn();
  }) / reps;
}

// Sums a large buffer with `threads` threads: the read bandwidth kernels can hope for.
double read_bandwidth(ThreadPool& pool, size_t bytes) {
  std::vector<uint64_t> buf(bytes / 8, 1);
  std::vector<uint64_t> sink(pool.size() * 8);
  const int64_t parts = pool.size() * 16;
  const size_t per = buf.size() / parts;
  const double s = time_per_call([&] {
    pool.parallel_for(parts, [&](int64_t p, int thread) {
      const uint64_t* b = buf.data() + p * per;
      uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
      for (size_t i = 0; i < per; i += 4) a0 += b[i], a1 += b[i + 1], a2 += b[i + 2], a3 += b[i + 3];
      sink[thread * 8] += a0 + a1 + a2 + a3;
    });
  });
  return static_cast<double>(per * parts * 8) / s / 1e9;
}

// Fastest call of run(view, n_tokens) with the views in turn: weights read from
// memory, the way a decode step over the whole model reads them.
template <class View, class Run>
double time_cycling(const std::vector<View>& views, int64_t n_tokens, Run run) {
  size_t next = 0;
  return time_per_call([&] {
    run(views[next], n_tokens);
    next = (next + 1) % views.size();
  });
}

struct Shape {
  const char* what;
  DType type;
  int64_t rows, cols;
};

// Copies of a weight matrix filling about `working_set` bytes, visited in turn so
// that a matvec reads from memory the way a decode step over the whole model does.
struct WeightSet {
  std::vector<uint8_t> bytes;
  std::vector<WeightView> views;
  size_t matrix_bytes;

  WeightSet(const Shape& s, size_t working_set) {
    const size_t rb = row_bytes(s.type, s.cols);
    matrix_bytes = rb * s.rows;
    const size_t copies = std::max<size_t>(1, working_set / matrix_bytes);
    std::vector<float> src(s.cols);
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> dist(-1, 1);
    std::vector<uint8_t> one(matrix_bytes);
    for (int64_t r = 0; r < s.rows; ++r) {
      for (auto& x : src) x = dist(rng);
      quantize_row(s.type, src.data(), one.data() + r * rb, s.cols);
    }
    bytes.resize(matrix_bytes * copies);
    for (size_t c = 0; c < copies; ++c) std::memcpy(bytes.data() + c * matrix_bytes, one.data(), matrix_bytes);
    for (size_t c = 0; c < copies; ++c)
      views.push_back(WeightView{s.type, bytes.data() + c * matrix_bytes, s.rows, s.cols, rb});
  }
};

// The same for a scaled weight (FP8 block-scaled, MXFP4) of random bytes (no
// NaN) and scales near 2^-4.
struct ScaledWeightSet {
  std::vector<uint8_t> bytes;
  std::vector<ScaledWeightView> views;
  size_t matrix_bytes;  // data and scales

  ScaledWeightSet(ScaledFormat format, int64_t rows, int64_t cols, size_t working_set) {
    ScaledWeightView w{format, ScaleType::E8M0, nullptr, nullptr, rows, cols};
    const size_t data = data_bytes(w);
    matrix_bytes = data + scale_bytes(w);
    const size_t copies = std::max<size_t>(1, working_set / matrix_bytes);
    bytes.resize(matrix_bytes * copies);
    std::mt19937 rng(1);
    for (size_t i = 0; i < matrix_bytes; ++i) {
      uint8_t b = static_cast<uint8_t>(rng());
      if (i >= data) b = static_cast<uint8_t>(120 + b % 4);
      else if (format == ScaledFormat::Fp8Block && (b & 0x7f) == 0x7f) b = 0x38;
      bytes[i] = b;
    }
    for (size_t c = 1; c < copies; ++c) std::memcpy(bytes.data() + c * matrix_bytes, bytes.data(), matrix_bytes);
    for (size_t c = 0; c < copies; ++c) {
      w.data = bytes.data() + c * matrix_bytes;
      w.scales = bytes.data() + c * matrix_bytes + data;
      views.push_back(w);
    }
  }
};

// DeepSeek-V4-Flash's scaled-weight shapes through Backend::matmul_scaled: one
// token (decode) in GB/s of weight bytes read (data and scales, from memory;
// hot: the same matrix again, from cache where it fits), and 8 tokens in GFLOP/s.
void bench_scaled(const std::vector<int>& thread_counts, size_t working_set) {
  struct ScaledShape {
    const char* what;
    ScaledFormat format;
    int64_t rows, cols;
  };
  const ScaledShape shapes[] = {
      {"expert w1/w3", ScaledFormat::Mxfp4, 2048, 4096},
      {"expert w2", ScaledFormat::Mxfp4, 4096, 2048},
      {"attn wq_b", ScaledFormat::Fp8Block, 32768, 1024},
      {"shared w1/w3", ScaledFormat::Fp8Block, 2048, 4096},
  };
  for (CpuIsa isa : {CpuIsa::Avx512, CpuIsa::Avx2, CpuIsa::Scalar}) {
    if (!cpu_isa_available(isa)) continue;
    for (int threads : thread_counts) {
      auto be = make_cpu_backend(threads, isa);
      std::printf("\nscaled weights (DeepSeek-V4-Flash), %s, threads=%d\n", be->name().c_str(), threads);
      std::printf("  %-13s %-9s %13s %10s %8s %9s %14s\n", "shape", "format", "rows x cols", "matvec us", "GB/s",
                  "hot GB/s", "8-tok GFLOP/s");
      for (const ScaledShape& s : shapes) {
        ScaledWeightSet ws(s.format, s.rows, s.cols, working_set);
        std::vector<float> x(8 * s.cols), y(8 * s.rows);
        std::mt19937 rng(2);
        std::uniform_real_distribution<float> dist(-1, 1);
        for (auto& v : x) v = dist(rng);
        const auto run = [&](const ScaledWeightView& w, int64_t n) { be->matmul_scaled(w, x.data(), n, y.data()); };
        const double saved = g_seconds;
        if (isa == CpuIsa::Scalar) g_seconds = 0;  // the slow scalar path: a few calls are enough
        const double mv = time_cycling(ws.views, 1, run);
        // The same matrix again and again: from cache where it fits, so compute-bound.
        const double hot = time_per_call([&] { run(ws.views[0], 1); });
        const double m8 = time_cycling(ws.views, 8, run);
        g_seconds = saved;
        const double gb = static_cast<double>(ws.matrix_bytes) / 1e9;
        std::printf("  %-13s %-9s %6lld x %-5lld %10.1f %8.1f %9.1f %14.1f\n", s.what, format_name(s.format),
                    static_cast<long long>(s.rows), static_cast<long long>(s.cols), mv * 1e6, gb / mv, gb / hot,
                    2.0 * s.rows * s.cols * 8 / m8 / 1e9);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool ops_only = false, scaled_only = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--cpu-time")
      g_cpu_time = true;
    else if (std::string(argv[i]) == "--ops")
      ops_only = true;
    else if (std::string(argv[i]) == "--scaled")
      scaled_only = true;
    else
      g_seconds = std::atof(argv[i]);
  }
  const std::vector<int> thread_counts = g_cpu_time ? std::vector<int>{1} : std::vector<int>{1, 2};
  const Shape shapes[] = {
      {"attn_q/o", DType::Q4_1, 576, 576},  {"attn_k/v", DType::Q4_1, 192, 576},
      {"ffn_gate/up", DType::Q4_1, 1536, 576}, {"ffn_down", DType::Q4_1, 576, 1536},
      {"output", DType::Q8_0, 49152, 576},
      // The same model converted to F16 / BF16 (the float-weight path).
      {"ffn_gate/up", DType::F16, 1536, 576},  {"ffn_down", DType::F16, 576, 1536},
      {"ffn_gate/up", DType::BF16, 1536, 576}, {"ffn_down", DType::BF16, 576, 1536},
  };
  const size_t kModelBytes = size_t(96) << 20;  // the default model reads ~96 MB per token

  std::printf("bench_kernels: %.2f s per measurement (best call, %s time), working set %zu MB per shape\n",
              g_seconds, g_cpu_time ? "thread CPU" : "wall", kModelBytes >> 20);
  for (int threads : thread_counts) {
    if (ops_only) break;
    ThreadPool pool(threads);
    std::printf("\nthreads=%d  read bandwidth: %.1f GB/s (96 MB buffer), %.1f GB/s (1 GB buffer)\n", threads,
                read_bandwidth(pool, kModelBytes), read_bandwidth(pool, size_t(1) << 30));
  }
  if (scaled_only) {
    bench_scaled(thread_counts, kModelBytes);
    return 0;
  }
  for (CpuIsa isa : {CpuIsa::Avx512, CpuIsa::Avx2, CpuIsa::Scalar}) {
    if (!cpu_isa_available(isa) || ops_only) continue;
    for (int threads : thread_counts) {
      auto be = make_cpu_backend(threads, isa);
      std::printf("\n%s, threads=%d\n", be->name().c_str(), threads);
      std::printf("  %-12s %-5s %13s %10s %8s %13s %14s %16s\n", "shape", "type", "rows x cols", "matvec us", "GB/s",
                  "hot GB/s", "8-tok GFLOP/s", "128-tok GFLOP/s");
      for (const Shape& s : shapes) {
        WeightSet ws(s, kModelBytes);
        std::vector<float> x(128 * s.cols), y(128 * s.rows);
        std::mt19937 rng(2);
        std::uniform_real_distribution<float> dist(-1, 1);
        for (auto& v : x) v = dist(rng);
        const auto run = [&](const WeightView& w, int64_t n) { be->matmul(w, x.data(), n, y.data()); };
        const double mv = time_cycling(ws.views, 1, run);
        // The same matrix again and again: from cache where it fits, so compute-bound.
        const double hot = time_per_call([&] { run(ws.views[0], 1); });
        const double saved = g_seconds;
        if (isa == CpuIsa::Scalar) g_seconds = 0;  // the slow scalar path: a few calls are enough
        // 8 tokens: a batched decode step (weights from memory, as in decode).
        const double m8 = time_cycling(ws.views, 8, run);
        const double mm = time_per_call([&] { be->matmul(ws.views[0], x.data(), 128, y.data()); });
        g_seconds = saved;
        const double gb = static_cast<double>(ws.matrix_bytes) / 1e9;
        std::printf("  %-12s %-5s %6lld x %-5lld %10.1f %8.1f %13.1f %14.1f %16.1f\n", s.what,
                    traits(s.type).name.data(), static_cast<long long>(s.rows), static_cast<long long>(s.cols),
                    mv * 1e6, gb / mv, gb / hot, 2.0 * s.rows * s.cols * 8 / m8 / 1e9,
                    2.0 * s.rows * s.cols * 128 / mm / 1e9);
      }
    }
  }

  if (!ops_only) bench_scaled(thread_counts, kModelBytes);

  // Attention of the default model (9 heads, 3 kv heads, head_dim 64, f16 cache)
  // through the backend, per SIMD instruction set: one decode token at contexts
  // 640 and 4096, and a 128-token prefill chunk; then the same with a sliding window.
  for (CpuIsa isa : {CpuIsa::Avx512, CpuIsa::Avx2}) {
    if (!cpu_isa_available(isa)) continue;
    for (int threads : thread_counts) {
      auto be = make_cpu_backend(threads, isa);
      const int n_heads = 9, n_kv = 3, hd = 64, bs = 16, ctx = 4096;
      const int n_blocks = ctx / bs;
      std::vector<uint16_t> k(size_t(n_blocks) * bs * n_kv * hd, 0x3c00), v(k.size(), 0x3800);
      std::vector<int32_t> table(n_blocks);
      for (int b = 0; b < n_blocks; ++b) table[b] = (b * 7) % n_blocks;  // scattered blocks
      const KvLayerView kv{DType::F16, k.data(), v.data(), bs, n_kv, hd};
      std::vector<float> q(128 * n_heads * hd, 0.01f), out(q.size());
      std::printf("\nattention %s threads=%d:", be->name().c_str(), threads);
      for (int c : {640, ctx}) {
        const AttnToken decode{table.data(), c - 1};
        const double t = time_per_call([&] { be->attention(kv, &decode, 1, c, q.data(), n_heads, 0.125f, out.data()); });
        std::printf(" decode at context %d %.1f us (%.1f GB/s of K+V);", c, t * 1e6, 2.0 * c * n_kv * hd * 2 / t / 1e9);
      }
      std::vector<AttnToken> chunk(128);
      for (int t = 0; t < 128; ++t) chunk[t] = AttnToken{table.data(), 1024 + t};
      const double t_pre =
          time_per_call([&] { be->attention(kv, chunk.data(), 128, 1024 + 128, q.data(), n_heads, 0.125f, out.data()); });
      std::printf(" 128-token prefill at context ~1100 %.2f ms\n", t_pre * 1e3);
      // A sliding window (Gemma's local layers) at the end of the context: decode
      // and a 128-token prefill chunk whose tokens read only the last 512 positions.
      const AttentionExtras window{0, 512};
      const AttnToken last{table.data(), ctx - 1};
      const double t_win = time_per_call(
          [&] { be->attention_extra(kv, &last, 1, ctx, q.data(), n_heads, 0.125f, window, out.data()); });
      for (int t = 0; t < 128; ++t) chunk[t] = AttnToken{table.data(), ctx - 128 + t};
      const double t_win_pre = time_per_call(
          [&] { be->attention_extra(kv, chunk.data(), 128, ctx, q.data(), n_heads, 0.125f, window, out.data()); });
      std::printf("  window %d at context %d: decode %.1f us, 128-token prefill %.2f ms\n", window.window, ctx,
                  t_win * 1e6, t_win_pre * 1e3);
    }
  }

  // Each op of the kernel tables alone, one thread, on the default model's
  // shapes: f16 cache, head_dim 64, 3 kv heads; decode reads a kv head with its
  // group of 3 queries, a prefill tile with 12 (4 tokens x 3 heads).
  {
    namespace kc = inferd::kernels::cpu;
    std::vector<const kc::KernelTable*> tables;
    for (const kc::KernelTable* t : {kc::avx512_kernels(), kc::avx2_kernels(), &kc::kScalarKernels})
      if (t) tables.push_back(t);
    const int n_kv = 3, hd = 64, bs = 16, ctx = 4096, n_blocks = ctx / bs;
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> dist(-1, 1);
    std::vector<uint16_t> k(size_t(n_blocks) * bs * n_kv * hd), v(k.size());
    for (auto& x : k) x = fp32_to_fp16(dist(rng));
    for (auto& x : v) x = fp32_to_fp16(dist(rng));
    std::vector<int32_t> table(n_blocks);
    for (int b = 0; b < n_blocks; ++b) table[b] = (b * 7) % n_blocks;
    const KvLayerView kv{DType::F16, k.data(), v.data(), bs, n_kv, hd};
    const int max_q = 12;
    std::vector<float> q(max_q * hd), s(size_t(max_q) * ctx), acc(max_q * hd), x(1536), y(1536), w(1536);
    for (auto& f : q) f = fp16_to_fp32(fp32_to_fp16(dist(rng)));
    for (auto& f : x) f = dist(rng) * 4;
    for (auto& f : w) f = dist(rng);
    std::vector<kc::ActTile> tiles(1536 / 32);
    std::vector<float> probs(ctx);
    for (auto& f : probs) f = dist(rng) * 8;

    struct Op {
      std::string name;
      double units;      // what "per unit" counts: positions, elements, blocks
      const char* unit;
      std::function<void(const kc::KernelTable&)> run;
    };
    std::vector<Op> ops;
    for (int c : {640, ctx})
      for (int nq : {3, 12}) {
        const std::string tag = " nq=" + std::to_string(nq) + " ctx=" + std::to_string(c);
        ops.push_back({"attn_scores" + tag, double(c), "pos", [&, c, nq](const kc::KernelTable& t) {
                         t.attn_scores(kv, table.data(), 0, c, q.data(), nq, 1, 0.125f, s.data(), ctx);
                       }});
        ops.push_back({"attn_values" + tag, double(c), "pos", [&, c, nq](const kc::KernelTable& t) {
                         t.attn_values(kv, table.data(), 0, c, s.data(), ctx, nq, 1, acc.data());
                       }});
      }
    // A larger head (Llama-style: head_dim 128, 8 kv heads), one query (no
    // grouping) and four.
    const int hd2 = 128, n_kv2 = 8, ctx2 = 1024;
    std::vector<uint16_t> k2(size_t(ctx2) * n_kv2 * hd2), v2(k2.size());
    for (auto& f : k2) f = fp32_to_fp16(dist(rng));
    for (auto& f : v2) f = fp32_to_fp16(dist(rng));
    std::vector<int32_t> table2(ctx2 / bs);
    for (int b = 0; b < ctx2 / bs; ++b) table2[b] = (b * 7) % (ctx2 / bs);
    const KvLayerView kv2{DType::F16, k2.data(), v2.data(), bs, n_kv2, hd2};
    std::vector<float> q2(4 * hd2, 0.1f), acc2(4 * hd2);
    for (int nq : {1, 4}) {
      const std::string tag = " hd=128 nq=" + std::to_string(nq) + " ctx=" + std::to_string(ctx2);
      ops.push_back({"attn_scores" + tag, double(ctx2), "pos", [&, nq](const kc::KernelTable& t) {
                       t.attn_scores(kv2, table2.data(), 0, ctx2, q2.data(), nq, 3, 0.1f, s.data(), ctx);
                     }});
      ops.push_back({"attn_values" + tag, double(ctx2), "pos", [&, nq](const kc::KernelTable& t) {
                       t.attn_values(kv2, table2.data(), 0, ctx2, s.data(), ctx, nq, 3, acc2.data());
                     }});
    }
    for (int c : {640, ctx}) {
      // softmax_exp overwrites its row: refresh it from probs each call (a copy, timed too, equal for all).
      ops.push_back({"softmax_exp n=" + std::to_string(c), double(c), "elem", [&, c](const kc::KernelTable& t) {
                       std::memcpy(s.data(), probs.data(), c * sizeof(float));
                       t.softmax_exp(s.data(), c);
                     }});
      ops.push_back({"scale_probs f16 n=" + std::to_string(c), double(c), "elem", [&, c](const kc::KernelTable& t) {
                       t.scale_probs(s.data(), c, 1.0f, true);
                     }});
    }
    ops.push_back({"rmsnorm_row n=576", 576, "elem", [&](const kc::KernelTable& t) {
                     t.rmsnorm_row(x.data(), w.data(), y.data(), 576, 1e-5f);
                   }});
    // One token's sizes (in L1), then a 512-token prefill's (megabytes: memory-bound).
    const int64_t big = 512 * 1536;
    std::vector<float> bx(big), by(big), bo(big);
    for (auto& f : bx) f = dist(rng) * 4;
    for (auto& f : by) f = dist(rng);
    for (int64_t n : {int64_t(1536), big})
      ops.push_back({"silu_mul n=" + std::to_string(n), double(n), "elem", [&, n](const kc::KernelTable& t) {
                       t.silu_mul(bx.data(), by.data(), bo.data(), n);
                     }});
    for (int64_t n : {int64_t(576), int64_t(512 * 576)})
      ops.push_back({"add n=" + std::to_string(n), double(n), "elem", [&, n](const kc::KernelTable& t) {
                       t.add(bo.data(), by.data(), n);
                     }});
    for (DType type : {DType::Q4_1, DType::Q8_0})
      for (int n : {576, 1536})
        ops.push_back({std::string("quantize_act ") + traits(type).name.data() + " n=" + std::to_string(n),
                       double(n / 32), "block", [&, type, n](const kc::KernelTable& t) {
                         t.quantize_act(type, x.data(), n, tiles.data(), 1);
                       }});

    std::printf("\nkernel table ops, one thread, ns per call (ns per unit):\n  %-34s", "op");
    for (const auto* t : tables) std::printf(" %22s", t->isa);
    std::printf("\n");
    for (const Op& op : ops) {
      std::printf("  %-34s", op.name.c_str());
      // Two rounds, the tables in one order and then the other, best of both:
      // whichever runs first would otherwise pay for the warm-up of the CPU.
      std::vector<double> best(tables.size(), 1e30);
      for (int round = 0; round < 2; ++round)
        for (size_t i = 0; i < tables.size(); ++i) {
          const size_t k = round ? tables.size() - 1 - i : i;
          const double saved = g_seconds;
          if (tables[k] == &kc::kScalarKernels) g_seconds = std::min(g_seconds, 0.05);
          best[k] = std::min(best[k], time_short_call([&] { op.run(*tables[k]); }));
          g_seconds = saved;
        }
      for (size_t k = 0; k < tables.size(); ++k) {
        const double sec = best[k];
        char cell[64];
        std::snprintf(cell, sizeof cell, "%.0f (%.2f/%s)", sec * 1e9, sec * 1e9 / op.units, op.unit);
        std::printf(" %22s", cell);
      }
      std::printf("\n");
    }
  }

  // Launch overheads, timed over batches of calls (wall time).
  g_cpu_time = false;
  constexpr int kBatch = 1000;
  ThreadPool pool(2);
  // Each of the two tasks waits for the other, so the worker must wake and join:
  // a full dispatch and barrier round trip.
  const double dispatch = time_per_call([&] {
    for (int i = 0; i < kBatch; ++i) {
      std::atomic<int> arrived{0};
      pool.parallel_for(2, [&](int64_t, int) {
        arrived.fetch_add(1);
        while (arrived.load() < 2) {
        }
      });
    }
  }) / kBatch;
  ShapeRegistry reg;
  const LaunchKey key{"matmul.q4_1", "n,k,t", {576, 576, 1}};
  const double touch = time_per_call([&] {
    for (int i = 0; i < kBatch; ++i) LaunchScope s(key, reg);
  }) / kBatch;
  std::printf("\nthread pool round trip (2 threads, both must run a task): %.2f us\nshape key touch (seen key): %.1f ns\n",
              dispatch * 1e6, touch * 1e9);
  return 0;
}
