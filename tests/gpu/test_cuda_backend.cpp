// The CUDA backend against the CPU backend's scalar kernels (the reference
// semantics) on random data: every op, every weight type, decode and prefill
// token counts, head_dim 64 and 128, grouped-query ratios, multi-block paged
// KV caches; and the backend's memory. Each comparison prints its maximum error
// ("max_err <op> ... abs=... tol=...") so a run's log records how close it is.
//
// Needs a CUDA device: without one the binary exits 77 (meson: skipped), or
// fails when INFERD_REQUIRE_GPU is set (tools/gpu-check sets it).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/sampler.hpp"
#include "kernels/backend.hpp"
#include "kernels/launch_keys.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/half.hpp"
#include "kernels/quantize.hpp"

using namespace inferd::kernels;

namespace {

Backend& gpu() {
  static std::unique_ptr<Backend> b = make_cuda_backend(0);
  return *b;
}

// The same kernels with the tensor-core GEMM off: what a captured step runs at
// any token count (the int8 tensor-core kernel up to 64 tokens, then the tile).
Backend& gpu_no_tc() {
  static std::unique_ptr<Backend> b = make_cuda_backend(
      0, CudaOptions{.tensor_core_min_tokens = INT64_MAX, .quantized_tensor_core_min_tokens = INT64_MAX});
  return *b;
}

// The one-token GEMV fused with its neighbours (CudaOptions::fuse_one_token).
Backend& gpu_fused() {
  static std::unique_ptr<Backend> b = make_cuda_backend(0, CudaOptions{.fuse_one_token = true});
  return *b;
}

Backend& cpu() {
  static std::unique_ptr<Backend> b = make_cpu_backend(0, CpuIsa::Scalar);
  return *b;
}

std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

template <class T>
Buffer to_gpu(const std::vector<T>& v) {
  Buffer b = gpu().alloc(v.size() * sizeof(T));
  gpu().upload(b.data(), v.data(), v.size() * sizeof(T));
  return b;
}

template <class T>
std::vector<T> from_gpu(const Buffer& b, size_t n) {
  std::vector<T> v(n);
  gpu().download(v.data(), b.data(), n * sizeof(T));
  return v;
}

// A device buffer of n floats poisoned with NaN, so an element no kernel wrote fails.
Buffer poisoned(size_t n) { return to_gpu(std::vector<float>(n, NAN)); }

// Max |got - want| over all elements; NaN anywhere makes it infinite.
double max_abs_err(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  double m = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(double(got[i]) - double(want[i]));
    if (std::isnan(d)) return INFINITY;
    m = std::max(m, d);
  }
  return m;
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, double(std::fabs(x)));
  return m;
}

// Checks and records one comparison: abs error within tol.
void expect_close(const std::string& what, const std::vector<float>& got, const std::vector<float>& want, double tol) {
  const double err = max_abs_err(got, want);
  std::printf("max_err %s abs=%.3g tol=%.3g\n", what.c_str(), err, tol);
  CHECK_MESSAGE(err <= tol, what, ": max abs error ", err, " over ", tol);
}

// A weight matrix in `type` from random floats: host bytes and the view of a device copy.
struct TestWeight {
  std::vector<uint8_t> bytes;
  WeightView host;
  Buffer dev;
  WeightView device;
};

TestWeight make_weight(DType type, int64_t rows, int64_t cols, uint32_t seed) {
  TestWeight w;
  const auto src = random_floats(rows * cols, seed);
  const size_t rb = row_bytes(type, cols);
  w.bytes.resize(rb * rows);
  for (int64_t r = 0; r < rows; ++r) quantize_row(type, src.data() + r * cols, w.bytes.data() + r * rb, cols);
  w.host = WeightView{type, w.bytes.data(), rows, cols, rb};
  w.dev = to_gpu(w.bytes);
  w.device = WeightView{type, w.dev.data(), rows, cols, rb};
  return w;
}

const char* type_name(DType t) { return traits(t).name.data(); }

}  // namespace

int main(int argc, char** argv) {
  if (cuda_device_count() == 0) {
    std::fprintf(stderr, "no CUDA device\n");
    return std::getenv("INFERD_REQUIRE_GPU") ? 1 : 77;
  }
  doctest::Context ctx(argc, argv);
  return ctx.run();
}

TEST_SUITE("gpu") {

TEST_CASE("memory: alloc, upload and download round-trip; zeroed alloc is zero; too much is bad_alloc") {
  CHECK(!gpu().host_visible());
  std::vector<uint8_t> bytes(1000003);
  std::mt19937 rng(7);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  Buffer b = to_gpu(bytes);
  CHECK(b.bytes() == bytes.size());
  CHECK(reinterpret_cast<uintptr_t>(b.data()) % 64 == 0);
  CHECK(from_gpu<uint8_t>(b, bytes.size()) == bytes);
  // Dirty memory that is given back, then a zeroed alloc of the same size.
  {
    Buffer dirty = to_gpu(std::vector<uint8_t>(1 << 20, 0xab));
  }
  Buffer z = gpu().alloc(1 << 20, true);
  const auto zs = from_gpu<uint8_t>(z, 1 << 20);
  CHECK(std::all_of(zs.begin(), zs.end(), [](uint8_t x) { return x == 0; }));
  CHECK_THROWS_AS(gpu().alloc(size_t(1) << 52), std::bad_alloc);
  // The backend still works after a refused alloc.
  CHECK(from_gpu<uint8_t>(b, 16) == std::vector<uint8_t>(bytes.begin(), bytes.begin() + 16));
}

TEST_CASE("get_rows matches the CPU for every type; an id outside the table is reported") {
  const int64_t rows = 300, cols = 256, n = 37;
  std::vector<int32_t> ids(n);
  std::mt19937 rng(3);
  for (auto& id : ids) id = static_cast<int32_t>(rng() % rows);
  Buffer dids = to_gpu(ids);
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::Q8_1}) {
    TestWeight w = make_weight(t, rows, cols, 11);
    std::vector<float> want(n * cols);
    cpu().get_rows(w.host, ids.data(), n, want.data());
    Buffer out = poisoned(n * cols);
    gpu().get_rows(w.device, dids.as<int32_t>(), n, out.as<float>());
    expect_close(std::string("get_rows ") + type_name(t), from_gpu<float>(out, n * cols), want, 0.0);
  }
  TestWeight w = make_weight(DType::F16, rows, cols, 12);
  Buffer bad = to_gpu(std::vector<int32_t>{1, int32_t(rows)});
  Buffer out = gpu().alloc(2 * cols * sizeof(float));
  gpu().get_rows(w.device, bad.as<int32_t>(), 2, out.as<float>());
  std::vector<float> host(2 * cols);
  CHECK_THROWS_AS(gpu().download(host.data(), out.data(), host.size() * sizeof(float)), std::out_of_range);
  gpu().download(host.data(), out.data(), host.size() * sizeof(float));  // reported once
}

TEST_CASE("matmul matches the CPU for every weight type, decode and prefill token counts") {
  struct Shape {
    int64_t rows, cols;
  };
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q4_0, DType::Q4_1, DType::Q8_0}) {
    // Rows for thousands of GEMV blocks, rows of several stages per warp, and
    // (4100 x 8192) more rows than one slab of dequantized weights.
    for (Shape s : {Shape{300, 512}, Shape{1000, 2048}, Shape{64, 96}, Shape{40, 11008}, Shape{4100, 256},
                    Shape{1100, 8320}, Shape{4100, 8192}}) {
      TestWeight w = make_weight(t, s.rows, s.cols, 21);
      // The weights as floats, for the tensor-core steps' reference.
      std::vector<float> table(s.rows * s.cols);
      std::vector<int32_t> all(s.rows);
      for (int64_t r = 0; r < s.rows; ++r) all[r] = static_cast<int32_t>(r);
      cpu().get_rows(w.host, all.data(), s.rows, table.data());
      const WeightView exact{DType::F32, table.data(), s.rows, s.cols, size_t(s.cols) * 4};
      for (int64_t n : {1, 2, 3, 8, 9, 16, 31, 40, 64, 100}) {
        const auto x = random_floats(n * s.cols, 31 + uint32_t(n));
        const bool tensor_cores = n >= CudaOptions{}.tensor_core_from(t) && t != DType::F32 && s.cols % 32 == 0;
        std::vector<float> want(n * s.rows);
        cpu().matmul(tensor_cores ? exact : w.host, x.data(), n, want.data());
        Buffer dx = to_gpu(x);
        Buffer y = poisoned(n * s.rows);
        gpu().matmul(w.device, dx.as<float>(), n, y.as<float>());
        // Below tensor-core sizes: the same products (float, or the same int8
        // blocks and scales for quantized types); only the summation order
        // differs. On the tensor cores: x rounded to halves (11 significant bits;
        // BF16 8), against the exact product of the weights as they dequantize.
        const double rel = !tensor_cores ? 2e-5 : t == DType::BF16 ? 8e-3 : 2e-3;
        expect_close(std::string("matmul ") + type_name(t) + (tensor_cores ? " tc " : " ") + std::to_string(s.rows) +
                         "x" + std::to_string(s.cols) + " t=" + std::to_string(n),
                     from_gpu<float>(y, n * s.rows), want, rel * std::max(1.0, max_abs(want)));
        if (tensor_cores && t != DType::F16 && t != DType::BF16) {
          std::vector<float> want_int8(n * s.rows);
          cpu().matmul(w.host, x.data(), n, want_int8.data());
          // The other backend has a stream of its own: the poison is in place
          // before its kernel runs, and its own download waits for that kernel.
          Buffer y2 = poisoned(n * s.rows);
          (void)from_gpu<float>(y2, 1);
          gpu_no_tc().matmul(w.device, dx.as<float>(), n, y2.as<float>());
          std::vector<float> got(n * s.rows);
          gpu_no_tc().download(got.data(), y2.data(), got.size() * sizeof(float));
          expect_close(std::string("matmul ") + type_name(t) + " int8 " + std::to_string(s.rows) + "x" +
                           std::to_string(s.cols) + " t=" + std::to_string(n),
                       got, want_int8, 2e-5 * std::max(1.0, max_abs(want_int8)));
        }
      }
    }
  }
}

TEST_CASE("matmul_shared: weights reading one input (q, k, v) match the CPU, one launch or several") {
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::F16}) {
    // Three weights of different row counts; four, which takes two launches.
    std::vector<TestWeight> ws;
    for (int64_t rows : {1000, 256, 256, 72}) ws.push_back(make_weight(t, rows, 2048, 40 + uint32_t(rows)));
    for (size_t count : {size_t(3), size_t(4)}) {
      for (int64_t n : {1, 3, 8, 9, 64}) {
        const auto x = random_floats(n * 2048, 50 + uint32_t(n));
        Buffer dx = to_gpu(x);
        std::vector<Buffer> ys;
        std::vector<MatmulOut> outs;
        for (size_t i = 0; i < count; ++i) {
          ys.push_back(poisoned(n * ws[i].device.rows));
          outs.push_back({ws[i].device, ys.back().as<float>()});
        }
        gpu().matmul_shared(outs, dx.as<float>(), n);
        for (size_t i = 0; i < count; ++i) {
          std::vector<float> alone(n * ws[i].device.rows);
          Buffer y = poisoned(alone.size());
          gpu().matmul(ws[i].device, dx.as<float>(), n, y.as<float>());
          // Exactly what the same weight gives on its own.
          expect_close(std::string("matmul_shared ") + type_name(t) + " w" + std::to_string(i) + " t=" +
                           std::to_string(n),
                       from_gpu<float>(ys[i], alone.size()), from_gpu<float>(y, alone.size()), 0.0);
        }
      }
    }
  }
}

TEST_CASE("one token: the GEMV that quantizes its input and ends in silu(gate) * up gives the separate kernels' bits") {
  // On a backend with the fusion on, an input 16-byte aligned takes the fused
  // GEMV (cuda::fuses_one_token); the same floats one float further on are only
  // 4-byte aligned and take quantize_act, the GEMV and silu_mul, as a backend
  // without the fusion does. Q8_0 at 5,120 columns gets 4 rows a block (8 would
  // not fit its shared memory), the others 8; 1,001 rows leave a block short.
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q8_0}) {
    for (int64_t cols : {int64_t(2048), int64_t(5120), int64_t(14336)}) {
      const int64_t rows = 1001;
      TestWeight g = make_weight(t, rows, cols, 60), u = make_weight(t, rows, cols, 61);
      const auto x = random_floats(cols, 62, -3.0f, 3.0f);
      std::vector<float> padded(cols + 1);
      std::copy(x.begin(), x.end(), padded.begin() + 1);
      Buffer dx = to_gpu(x), dpad = to_gpu(padded);
      const float* aligned = dx.as<float>();
      const float* unaligned = dpad.as<float>() + 1;
      Buffer y_fused = poisoned(rows), y_sep = poisoned(rows);
      Buffer gf = poisoned(rows), uf = poisoned(rows), gs = poisoned(rows), us = poisoned(rows);
      // The uploads above ran on gpu()'s stream: done before the other backend's kernels.
      (void)from_gpu<float>(us, 1);
      Backend& be = gpu_fused();
      auto read = [&](const Buffer& buf) {
        std::vector<float> v(rows);
        be.download(v.data(), buf.data(), v.size() * sizeof(float));
        return v;
      };
      const std::string what = std::string(type_name(t)) + " " + std::to_string(rows) + "x" + std::to_string(cols);

      be.matmul(g.device, aligned, 1, y_fused.as<float>());
      be.matmul(g.device, unaligned, 1, y_sep.as<float>());
      const auto gate = read(y_sep);
      expect_close("gemv quantizing its input " + what, read(y_fused), gate, 0.0);
      // Four weights on one input take two launches of at most three.
      std::vector<Buffer> ys;
      std::vector<MatmulOut> outs;
      for (int i = 0; i < 4; ++i) {
        ys.push_back(gpu_fused().alloc(rows * sizeof(float)));
        outs.push_back({i % 2 ? u.device : g.device, ys.back().as<float>()});
      }
      be.matmul_shared(outs, aligned, 1);
      be.matmul(u.device, unaligned, 1, y_sep.as<float>());
      const auto up = read(y_sep);
      for (int i = 0; i < 4; ++i)
        expect_close("gemv quantizing its input, shared " + std::to_string(i) + " " + what, read(ys[i]),
                     i % 2 ? up : gate, 0.0);

      be.matmul_silu_mul({g.device, gf.as<float>()}, {u.device, uf.as<float>()}, aligned, 1);
      be.matmul_silu_mul({g.device, gs.as<float>()}, {u.device, us.as<float>()}, unaligned, 1);
      const auto want = read(gs);
      expect_close("gemv ending in silu * up " + what, read(gf), want, 0.0);

      // And the CPU: its matmuls (the same int8 activations) and silu_mul; each
      // product is within 2e-5 of its largest output (the matmul test's bound),
      // which a product of the two carries as at most twice that of |gate| |up|.
      std::vector<float> cg(rows), cu(rows), cs(rows);
      cpu().matmul(g.host, x.data(), 1, cg.data());
      cpu().matmul(u.host, x.data(), 1, cu.data());
      cpu().silu_mul(cg.data(), cu.data(), cs.data(), rows);
      expect_close("gemv ending in silu * up vs CPU " + what, want, cs,
                   4e-5 * std::max(1.0, max_abs(cg)) * std::max(1.0, max_abs(cu)));
    }
  }
}

TEST_CASE("rmsnorm, silu_mul and add match the CPU") {
  for (int64_t rows : {1, 7, 64}) {
    for (int64_t n : {100, 576, 4096, 10000}) {  // 10000: more than a block holds in registers
      const auto x = random_floats(rows * n, 41, -3.0f, 3.0f), w = random_floats(n, 42);
      std::vector<float> want(rows * n);
      cpu().rmsnorm(x.data(), w.data(), want.data(), rows, n, 1e-5f);
      Buffer dx = to_gpu(x), dw = to_gpu(w), y = poisoned(rows * n);
      gpu().rmsnorm(dx.as<float>(), dw.as<float>(), y.as<float>(), rows, n, 1e-5f);
      expect_close("rmsnorm rows=" + std::to_string(rows) + " n=" + std::to_string(n), from_gpu<float>(y, rows * n),
                   want, 1e-6);
    }
  }
  for (int64_t n : {1, 1000, 1 << 20}) {
    const auto g = random_floats(n, 51, -8.0f, 8.0f), u = random_floats(n, 52);
    std::vector<float> want(n);
    cpu().silu_mul(g.data(), u.data(), want.data(), n);
    Buffer dg = to_gpu(g), du = to_gpu(u), out = poisoned(n);
    gpu().silu_mul(dg.as<float>(), du.as<float>(), out.as<float>(), n);
    expect_close("silu_mul n=" + std::to_string(n), from_gpu<float>(out, n), want, 1e-6);

    std::vector<float> sum = g;
    cpu().add(sum.data(), u.data(), n);
    gpu().add(dg.as<float>(), du.as<float>(), n);
    expect_close("add n=" + std::to_string(n), from_gpu<float>(dg, n), sum, 0.0);
  }
  for (int64_t rows : {1, 5, 300}) {  // a bias over every row: one launch on the GPU
    for (int64_t n : {8, 1000, 4096}) {
      const auto y = random_floats(rows * n, 53), b = random_floats(n, 54);
      std::vector<float> want = y;
      cpu().add_rows(want.data(), b.data(), rows, n);
      Buffer dy = to_gpu(y), db = to_gpu(b);
      gpu().add_rows(dy.as<float>(), db.as<float>(), rows, n);
      expect_close("add_rows rows=" + std::to_string(rows) + " n=" + std::to_string(n), from_gpu<float>(dy, rows * n),
                   want, 0.0);
    }
  }
  // A tensor-parallel rank's slice of the logits into place: cols of a wider row, the rest untouched.
  for (int64_t rows : {1, 7}) {
    const int64_t cols = 999, src_stride = 1000, dst_stride = 1999, at = 1000;
    const auto src = random_floats(rows * src_stride, 57), dst = random_floats(rows * dst_stride, 58);
    std::vector<float> want = dst;
    cpu().copy_rows(src.data(), src_stride, want.data() + at, dst_stride, rows, cols);
    Buffer ds = to_gpu(src), dd = to_gpu(dst);
    gpu().copy_rows(ds.as<float>(), src_stride, dd.as<float>() + at, dst_stride, rows, cols);
    expect_close("copy_rows rows=" + std::to_string(rows), from_gpu<float>(dd, rows * dst_stride), want, 0.0);
  }
}

TEST_CASE("gelu_mul, scale and softcap (Gemma's ops) match the CPU") {
  for (int64_t n : {1, 1000, 1 << 20}) {
    const auto g = random_floats(n, 55, -8.0f, 8.0f), u = random_floats(n, 56);
    std::vector<float> want(n);
    cpu().gelu_mul(g.data(), u.data(), want.data(), n);
    Buffer dg = to_gpu(g), du = to_gpu(u), out = poisoned(n);
    gpu().gelu_mul(dg.as<float>(), du.as<float>(), out.as<float>(), n);
    expect_close("gelu_mul n=" + std::to_string(n), from_gpu<float>(out, n), want, 1e-6);

    std::vector<float> scaled = g;
    cpu().scale(scaled.data(), 1.7f, n);
    gpu().scale(dg.as<float>(), 1.7f, n);
    expect_close("scale n=" + std::to_string(n), from_gpu<float>(dg, n), scaled, 0.0);

    std::vector<float> capped = scaled;
    cpu().softcap(capped.data(), 5.0f, n);
    gpu().softcap(dg.as<float>(), 5.0f, n);
    expect_close("softcap n=" + std::to_string(n), from_gpu<float>(dg, n), capped, 1e-6);
  }
}

TEST_CASE("sample: greedy rows take the argmax; drawn rows follow the CPU sampler's distribution") {
  // Greedy: the first of equal maxima; ids from n_valid on are never taken.
  {
    const int64_t vocab = 70000, rows = 4;
    auto logits = random_floats(rows * vocab, 71, -5.0f, 5.0f);
    logits[1 * vocab + 9] = logits[1 * vocab + 7] = 50.0f;  // a tie: 7
    logits[2 * vocab + vocab - 1] = 1000.0f;                // padding past n_valid
    logits[3 * vocab + 123] = NAN;                          // NaN never wins
    std::vector<RowSampling> params(rows);
    params[2].n_valid = int32_t(vocab - 5);
    std::vector<int32_t> want(rows);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t n = params[r].n_valid > 0 ? params[r].n_valid : vocab;
      float best = -INFINITY;
      for (int64_t i = 0; i < n; ++i)
        if (logits[r * vocab + i] > best) best = logits[r * vocab + i], want[r] = int32_t(i);
    }
    CHECK(want[1] == 7);
    Buffer dl = to_gpu(logits), dp = to_gpu(params), dt = to_gpu(std::vector<int32_t>(rows, -1));
    gpu().sample(dl.as<float>(), rows, vocab, dp.as<RowSampling>(), dt.as<int32_t>());
    CHECK(from_gpu<int32_t>(dt, rows) == want);
  }
  // Drawn: many rows of the same logits, each with its own random bits, against
  // the distribution the CPU's sampler draws from (engine::sampling_distribution):
  // no token outside its support, each frequency within 5 standard deviations.
  const int64_t vocab = 3000, rows = 20000;
  std::vector<float> row(vocab, -30.0f);  // the tail: about 1e-13 each
  const float head[] = {2.0f, 1.7f, 1.3f, 1.0f, 0.5f, 0.0f, -1.0f, -2.0f};
  for (int i = 0; i < 8; ++i) row[size_t(100 + 37 * i)] = head[i];
  std::vector<float> logits;
  for (int64_t r = 0; r < rows; ++r) logits.insert(logits.end(), row.begin(), row.end());
  Buffer dl = to_gpu(logits);
  struct Case {
    float temperature;
    int top_k;
    float top_p, min_p;
  };
  for (const Case c : {Case{1.0f, 0, 1.0f, 0.0f}, Case{0.7f, 3, 1.0f, 0.0f}, Case{1.0f, 0, 0.8f, 0.0f},
                       Case{1.3f, 0, 1.0f, 0.2f}, Case{2.0f, 6, 0.9f, 0.05f}}) {
    inferd::engine::SamplingParams sp;
    sp.temperature = c.temperature, sp.top_k = c.top_k, sp.top_p = c.top_p, sp.min_p = c.min_p;
    std::vector<double> want(vocab, 0.0);
    for (const auto& [id, p] : inferd::engine::sampling_distribution(row, sp)) want[size_t(id)] = p;
    std::vector<RowSampling> params(rows);
    for (int64_t r = 0; r < rows; ++r) {
      params[r].greedy = false;
      params[r].temperature = c.temperature, params[r].top_k = c.top_k, params[r].top_p = c.top_p;
      params[r].min_p = c.min_p, params[r].random = 0x9E3779B97F4A7C15ull * uint64_t(r + 1) + 17;
    }
    Buffer dp = to_gpu(params), dt = to_gpu(std::vector<int32_t>(rows, -1));
    gpu().sample(dl.as<float>(), rows, vocab, dp.as<RowSampling>(), dt.as<int32_t>());
    std::vector<double> seen(vocab, 0.0);
    for (int32_t t : from_gpu<int32_t>(dt, rows)) {
      REQUIRE(t >= 0);
      REQUIRE(t < vocab);
      seen[size_t(t)] += 1.0 / double(rows);
    }
    const std::string what = "T=" + std::to_string(c.temperature) + " top_k=" + std::to_string(c.top_k) +
                             " top_p=" + std::to_string(c.top_p) + " min_p=" + std::to_string(c.min_p);
    for (int64_t i = 0; i < vocab; ++i) {
      const double p = want[size_t(i)], sd = std::sqrt(p * (1 - p) / double(rows));
      if (p == 0.0) CHECK_MESSAGE(seen[size_t(i)] == 0.0, what, ": token ", i, " is outside the CPU's support");
      else CHECK_MESSAGE(std::abs(seen[size_t(i)] - p) <= 5 * sd + 1e-4, what, ": token ", i, " drawn ",
                         seen[size_t(i)], ", the CPU's probability ", p);
    }
  }
}

TEST_CASE("add_rmsnorm matches the CPU's add then rmsnorm, with the output in place of the residual") {
  for (int64_t rows : {1, 7, 64}) {
    for (int64_t n : {100, 576, 4096, 10000}) {  // 10000: more than a block holds in registers
      auto x = random_floats(rows * n, 43, -3.0f, 3.0f);
      auto r = random_floats(rows * n, 44, -1.0f, 1.0f);
      const auto w = random_floats(n, 45);
      Buffer dx = to_gpu(x), dr = to_gpu(r), dw = to_gpu(w);
      cpu().add_rmsnorm(x.data(), r.data(), w.data(), r.data(), rows, n, 1e-5f);
      gpu().add_rmsnorm(dx.as<float>(), dr.as<float>(), dw.as<float>(), dr.as<float>(), rows, n, 1e-5f);
      const std::string shape = " rows=" + std::to_string(rows) + " n=" + std::to_string(n);
      expect_close("add_rmsnorm sum" + shape, from_gpu<float>(dx, rows * n), x, 0.0);
      expect_close("add_rmsnorm norm" + shape, from_gpu<float>(dr, rows * n), r, 1e-6);
    }
  }
}

TEST_CASE("rope matches the CPU: both layouts, partial rotation, scaled frequencies") {
  const int64_t n_tokens = 19;
  std::vector<int32_t> pos(n_tokens);
  std::mt19937 rng(61);
  for (auto& p : pos) p = static_cast<int32_t>(rng() % 8192);
  pos[0] = 0;
  Buffer dpos = to_gpu(pos);
  for (int hd : {64, 128}) {
    for (int n_rot : {hd, hd / 2}) {
      for (bool neox : {false, true}) {
        for (float freq_scale : {1.0f, 0.25f}) {
          const int n_heads = 5;
          const RopeParams p{n_rot, 10000.0f, freq_scale, neox};
          auto x = random_floats(n_tokens * n_heads * hd, 62);
          Buffer dx = to_gpu(x);
          cpu().rope(x.data(), pos.data(), n_tokens, n_heads, hd, p);
          gpu().rope(dx.as<float>(), dpos.as<int32_t>(), n_tokens, n_heads, hd, p);
          // Same angles bit for bit; cos and sin may round differently in the last place.
          expect_close("rope hd=" + std::to_string(hd) + " n_rot=" + std::to_string(n_rot) +
                           (neox ? " neox" : " norm") + " freq_scale=" + std::to_string(freq_scale),
                       from_gpu<float>(dx, x.size()), x, 1e-6);
        }
      }
    }
  }
}

namespace {

// A paged KV cache for both backends with the same block tables: `n_seqs`
// sequences of up to max_pos + 1 positions each, their blocks scattered over
// the cache in a random order.
struct PagedCache {
  DType type;
  int block_size = 16, n_kv, hd;
  int blocks_per_seq;
  std::vector<int32_t> tables;  // [seq][blocks_per_seq]
  std::vector<uint8_t> ck, cv;  // the CPU's cache
  Buffer gk, gv, gtables;

  PagedCache(DType type, int n_seqs, int max_pos, int n_kv, int hd) : type(type), n_kv(n_kv), hd(hd) {
    blocks_per_seq = max_pos / block_size + 1;
    const int n_blocks = n_seqs * blocks_per_seq + 3;
    std::vector<int32_t> perm(n_blocks);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), std::mt19937(71));
    tables.assign(perm.begin(), perm.begin() + n_seqs * blocks_per_seq);
    const size_t bytes = size_t(n_blocks) * block_size * n_kv * hd * (type == DType::F16 ? 2 : 4);
    ck.assign(bytes, 0);
    cv.assign(bytes, 0);
    gk = gpu().alloc(bytes, true);
    gv = gpu().alloc(bytes, true);
    gtables = to_gpu(tables);
  }
  KvLayerView cpu_view() { return KvLayerView{type, ck.data(), cv.data(), block_size, n_kv, hd}; }
  KvLayerView gpu_view() { return KvLayerView{type, gk.data(), gv.data(), block_size, n_kv, hd}; }
  std::vector<AttnToken> cpu_toks(const std::vector<std::pair<int, int32_t>>& seq_pos) {
    std::vector<AttnToken> t;
    for (auto [s, p] : seq_pos) t.push_back({tables.data() + s * blocks_per_seq, p});
    return t;
  }
  Buffer gpu_toks(const std::vector<std::pair<int, int32_t>>& seq_pos) {
    std::vector<AttnToken> t;
    for (auto [s, p] : seq_pos) t.push_back({gtables.as<int32_t>() + s * blocks_per_seq, p});
    return to_gpu(t);
  }
  // Stores random K and V for these (sequence, position) tokens in both caches.
  void store(const std::vector<std::pair<int, int32_t>>& seq_pos, uint32_t seed) {
    const int64_t n = seq_pos.size(), row = int64_t(n_kv) * hd;
    const auto k = random_floats(n * row, seed), v = random_floats(n * row, seed + 1);
    const auto ct = cpu_toks(seq_pos);
    cpu().kv_store(cpu_view(), ct.data(), n, k.data(), v.data());
    Buffer gt = gpu_toks(seq_pos), dk = to_gpu(k), dv = to_gpu(v);
    gpu().kv_store(gpu_view(), gt.as<AttnToken>(), n, dk.as<float>(), dv.as<float>());
  }
};

std::vector<std::pair<int, int32_t>> positions(int seq, int32_t from, int32_t to) {
  std::vector<std::pair<int, int32_t>> out;
  for (int32_t p = from; p < to; ++p) out.push_back({seq, p});
  return out;
}

}  // namespace

TEST_CASE("kv_store and paged attention match the CPU: decode, prefill and mixed steps, GQA, both cache types") {
  struct Step {
    const char* name;
    std::vector<std::pair<int, int32_t>> toks;
  };
  struct Heads {
    int hd, n_kv, group;
  };
  std::vector<Heads> configs;
  for (int hd : {64, 128})
    for (auto [n_kv, group] : {std::pair{1, 1}, std::pair{2, 4}, std::pair{4, 8}, std::pair{8, 1}})
      configs.push_back({hd, n_kv, group});
  // A group that fills its kernel's slots partly, one larger than the fast
  // kernel's 8, and a head size it does not take.
  configs.push_back({128, 2, 3});
  configs.push_back({64, 1, 16});
  configs.push_back({96, 2, 2});
  for (DType type : {DType::F16, DType::F32}) {
    for (const Heads& heads : configs) {
      {
        const int hd = heads.hd, n_kv = heads.n_kv, group = heads.group;
        const int n_heads = n_kv * group, n_seqs = 3, max_pos = 2100;
        PagedCache c(type, n_seqs, max_pos, n_kv, hd);
        // History: sequence 0 has 2000 positions, 1 has 40, 2 has 1000.
        c.store(positions(0, 0, 2000), 81);
        c.store(positions(1, 0, 40), 82);
        c.store(positions(2, 0, 1000), 83);
        const std::vector<Step> steps = {
            {"decode", {{0, 2000}, {1, 40}, {2, 1000}}},
            {"decode-first", {{1, 0}}},
            {"prefill", positions(1, 40, 100)},
            {"mixed", [] {
               auto t = positions(2, 1000, 1033);
               t.push_back({0, 2001});
               return t;
             }()},
        };
        for (const Step& s : steps) {
          const std::string what = std::string(type_name(type)) + " hd=" + std::to_string(hd) +
                                    " kv=" + std::to_string(n_kv) + " heads=" + std::to_string(n_heads) + " " + s.name;
          const int64_t n = s.toks.size();
          c.store(s.toks, 90 + uint32_t(n));
          CHECK_MESSAGE(from_gpu<uint8_t>(c.gk, c.ck.size()) == c.ck, "kv_store ", what, ": K caches differ");
          CHECK_MESSAGE(from_gpu<uint8_t>(c.gv, c.cv.size()) == c.cv, "kv_store ", what, ": V caches differ");
          const auto q = random_floats(n * n_heads * hd, 95);
          const float scale = 1.0f / std::sqrt(float(hd));
          std::vector<float> want(n * n_heads * hd);
          const auto ct = c.cpu_toks(s.toks);
          const int64_t reach = launch_keys::attention_reach(ct.data(), n);
          cpu().attention(c.cpu_view(), ct.data(), n, reach, q.data(), n_heads, scale, want.data());
          Buffer gt = c.gpu_toks(s.toks), dq = to_gpu(q), out = poisoned(want.size());
          gpu().attention(c.gpu_view(), gt.as<AttnToken>(), n, reach, dq.as<float>(), n_heads, scale, out.as<float>());
          // f16 cache: the CPU rounds each probability to f16 (relative 2^-11), the
          // GPU keeps them in float; outputs are averages of values in [-1, 1].
          expect_close("attention " + what, from_gpu<float>(out, want.size()), want,
                       type == DType::F16 ? 1e-3 : 2e-5);
          // Later steps see the same cache on both sides only if each step's tokens stay stored.
        }
      }
    }
  }
}

TEST_CASE("attention with soft-capped scores and a sliding window matches the CPU, slices outside the window read nothing") {
  for (DType type : {DType::F16, DType::F32}) {
    for (int hd : {8, 64, 128}) {  // 8: the generic kernel (Gemma's tiny fixtures); 64, 128: the fast one
      const int n_kv = 2, group = 2, n_heads = n_kv * group, n_seqs = 2;
      PagedCache c(type, n_seqs, 1200, n_kv, hd);
      c.store(positions(0, 0, 1100), 61);
      c.store(positions(1, 0, 30), 62);
      const std::vector<std::pair<int, int32_t>> decode = {{0, 1100}, {1, 30}};
      const auto prefill = positions(1, 31, 60);
      for (const auto& toks : {decode, prefill}) {
        c.store(toks, 63);
        for (const AttentionExtras extras : {AttentionExtras{2.0f, 0}, AttentionExtras{0, 8}, AttentionExtras{0, 300},
                                             AttentionExtras{30.0f, 4096}}) {
          const std::string what = std::string(type_name(type)) + " hd=" + std::to_string(hd) + " tokens=" +
                                    std::to_string(toks.size()) + " cap=" + std::to_string(extras.softcap) +
                                    " window=" + std::to_string(extras.window);
          const int64_t n = toks.size();
          const auto q = random_floats(n * n_heads * hd, 64);
          const float scale = 1.0f / std::sqrt(float(hd));
          std::vector<float> want(n * n_heads * hd);
          const auto ct = c.cpu_toks(toks);
          const int64_t reach = launch_keys::attention_reach(ct.data(), n);
          cpu().attention_extra(c.cpu_view(), ct.data(), n, reach, q.data(), n_heads, scale, extras, want.data());
          Buffer gt = c.gpu_toks(toks), dq = to_gpu(q), out = poisoned(want.size());
          gpu().attention_extra(c.gpu_view(), gt.as<AttnToken>(), n, reach, dq.as<float>(), n_heads, scale, extras,
                                out.as<float>());
          expect_close("attention_extra " + what, from_gpu<float>(out, want.size()), want,
                       type == DType::F16 ? 1e-3 : 2e-5);
        }
      }
    }
  }
}

namespace {

// A KV cache's bytes as floats (F16 or F32), for comparisons with a tolerance.
std::vector<float> cache_floats(DType type, const std::vector<uint8_t>& bytes) {
  std::vector<float> out;
  if (type == DType::F16) {
    out.resize(bytes.size() / 2);
    for (size_t i = 0; i < out.size(); ++i) {
      uint16_t h;
      std::memcpy(&h, bytes.data() + 2 * i, 2);
      out[i] = fp16_to_fp32(h);
    }
  } else {
    out.resize(bytes.size() / 4);
    std::memcpy(out.data(), bytes.data(), bytes.size());
  }
  return out;
}

}  // namespace

TEST_CASE("rope_kv_store matches rope, rope and kv_store: the GPU's own bit for bit, the CPU's within rope's tolerance") {
  struct Heads {
    int hd, n_kv, group;
  };
  for (DType type : {DType::F16, DType::F32}) {
    for (Heads heads : {Heads{64, 2, 4}, Heads{128, 4, 1}, Heads{128, 1, 8}}) {
      for (bool partial : {false, true}) {
        for (bool neox : {false, true}) {
          for (int64_t n : {int64_t(3), int64_t(21)}) {
            const int hd = heads.hd, n_kv = heads.n_kv, n_heads = n_kv * heads.group;
            const RopeParams p{partial ? hd / 2 : hd, 10000.0f, partial ? 0.25f : 1.0f, neox};
            // Decode: one token of each of three sequences; prefill: a run of one sequence.
            std::vector<std::pair<int, int32_t>> toks;
            for (int64_t t = 0; t < n; ++t) toks.push_back(n == 3 ? std::pair{int(t), int32_t(40 * t + 7)}
                                                                  : std::pair{1, int32_t(30 + t)});
            std::vector<int32_t> pos;
            for (auto [s, ps] : toks) pos.push_back(ps);
            const std::string what = std::string(type_name(type)) + " hd=" + std::to_string(hd) +
                                     " kv=" + std::to_string(n_kv) + " heads=" + std::to_string(n_heads) +
                                     (partial ? " n_rot=hd/2" : "") + (neox ? " neox" : " norm") +
                                     " tokens=" + std::to_string(n);
            auto q = random_floats(n * n_heads * hd, 111), k = random_floats(n * n_kv * hd, 112);
            const auto v = random_floats(n * n_kv * hd, 113);
            PagedCache fused(type, 3, 200, n_kv, hd), apart(type, 3, 200, n_kv, hd);
            Buffer dpos = to_gpu(pos), dv = to_gpu(v);
            Buffer fq = to_gpu(q), fk = to_gpu(k), ft = fused.gpu_toks(toks);
            gpu().rope_kv_store(fq.as<float>(), fk.as<float>(), dv.as<float>(), dpos.as<int32_t>(), n, n_heads, p,
                                fused.gpu_view(), ft.as<AttnToken>());
            Buffer aq = to_gpu(q), ak = to_gpu(k), at = apart.gpu_toks(toks);
            gpu().rope(aq.as<float>(), dpos.as<int32_t>(), n, n_heads, hd, p);
            gpu().rope(ak.as<float>(), dpos.as<int32_t>(), n, n_kv, hd, p);
            gpu().kv_store(apart.gpu_view(), at.as<AttnToken>(), n, ak.as<float>(), dv.as<float>());
            const auto ct = fused.cpu_toks(toks);
            cpu().rope_kv_store(q.data(), k.data(), v.data(), pos.data(), n, n_heads, p, fused.cpu_view(), ct.data());

            const auto gq = from_gpu<float>(fq, q.size()), gk = from_gpu<float>(fk, k.size());
            const auto gk_cache = from_gpu<uint8_t>(fused.gk, fused.ck.size());
            const auto gv_cache = from_gpu<uint8_t>(fused.gv, fused.cv.size());
            expect_close("rope_kv_store q vs GPU rope " + what, gq, from_gpu<float>(aq, q.size()), 0.0);
            expect_close("rope_kv_store k vs GPU rope " + what, gk, from_gpu<float>(ak, k.size()), 0.0);
            CHECK_MESSAGE(gk_cache == from_gpu<uint8_t>(apart.gk, apart.ck.size()), "rope_kv_store ", what,
                          ": K cache differs from the GPU's kv_store");
            CHECK_MESSAGE(gv_cache == from_gpu<uint8_t>(apart.gv, apart.cv.size()), "rope_kv_store ", what,
                          ": V cache differs from the GPU's kv_store");
            // Against the CPU: rope's cos and sin may round differently in the last
            // place, which an f16 cache can turn into one half ulp (2^-10 below 2).
            expect_close("rope_kv_store q vs CPU " + what, gq, q, 1e-6);
            expect_close("rope_kv_store k vs CPU " + what, gk, k, 1e-6);
            expect_close("rope_kv_store K cache vs CPU " + what, cache_floats(type, gk_cache),
                         cache_floats(type, fused.ck), type == DType::F16 ? 1e-3 : 1e-6);
            CHECK_MESSAGE(gv_cache == fused.cv, "rope_kv_store ", what, ": V cache differs from the CPU's");
          }
        }
      }
    }
  }
}

TEST_CASE("the CUDA backend registers the same launch keys as the CPU backend") {
  auto keys_of = [](auto&& run) {
    ShapeRegistry::global().clear();
    run();
    std::set<std::string> out;
    for (const auto& [key, use] : ShapeRegistry::global().snapshot()) out.insert(key.str());
    return out;
  };
  TestWeight w = make_weight(DType::Q4_1, 128, 256, 101);
  const auto x = random_floats(5 * 256, 102);
  Buffer dx = to_gpu(x), dy = gpu().alloc(5 * 128 * sizeof(float));
  std::vector<float> y(5 * 128);
  PagedCache c(DType::F16, 1, 300, 2, 64);
  c.store(positions(0, 0, 300), 103);
  const auto q = random_floats(8 * 64, 104);
  Buffer dq = to_gpu(q), dout = gpu().alloc(q.size() * sizeof(float));
  std::vector<float> out(q.size());
  const auto toks = positions(0, 299, 300);
  Buffer gt = c.gpu_toks(toks);
  const auto ct = c.cpu_toks(toks);
  // rope of q (8 heads) and of k (2), and kv_store, from one rope_kv_store.
  auto k_in = random_floats(2 * 64, 105), q_rot = q;
  const auto v_in = random_floats(2 * 64, 106);
  const std::vector<int32_t> pos = {299};
  Buffer dk = to_gpu(k_in), dv = to_gpu(v_in), dpos = to_gpu(pos);
  const RopeParams rp{64, 10000.0f, 1.0f, false};
  const auto on_gpu = keys_of([&] {
    gpu().matmul(w.device, dx.as<float>(), 5, dy.as<float>());
    gpu().attention(c.gpu_view(), gt.as<AttnToken>(), 1, 300, dq.as<float>(), 8, 0.125f, dout.as<float>());
    gpu().rope_kv_store(dq.as<float>(), dk.as<float>(), dv.as<float>(), dpos.as<int32_t>(), 1, 8, rp, c.gpu_view(),
                        gt.as<AttnToken>());
    gpu().add_rows(dy.as<float>(), dx.as<float>(), 5, 128);
  });
  const auto on_cpu = keys_of([&] {
    cpu().matmul(w.host, x.data(), 5, y.data());
    cpu().attention(c.cpu_view(), ct.data(), 1, 300, q.data(), 8, 0.125f, out.data());
    cpu().rope_kv_store(q_rot.data(), k_in.data(), v_in.data(), pos.data(), 1, 8, rp, c.cpu_view(), ct.data());
    cpu().add_rows(y.data(), x.data(), 5, 128);
  });
  CHECK(on_gpu.size() == 7);
  CHECK(on_gpu == on_cpu);
}

}  // TEST_SUITE
