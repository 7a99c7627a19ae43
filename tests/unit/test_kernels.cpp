// The CPU kernels against straightforward float references, the SIMD tables
// against the scalar one, the thread pool and the shape-key registry.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "faults/fault_points.hpp"
#include "kernels/backend.hpp"
#include "kernels/launch_keys.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/cpu/kernel_table.hpp"
#include "kernels/half.hpp"
#include "kernels/quantize.hpp"
#include "kernels/thread_pool.hpp"
#include "tests/unit/test_weights.hpp"

using namespace inferd::kernels;
using test_weights::make_weight;
using test_weights::random_floats;
using test_weights::TestWeight;

namespace {

// The SIMD instruction sets this CPU and build have, each tested against the scalar kernels.
std::vector<CpuIsa> simd_isas() {
  std::vector<CpuIsa> out;
  for (CpuIsa isa : {CpuIsa::Avx2, CpuIsa::Avx512})
    if (cpu_isa_available(isa)) out.push_back(isa);
  return out;
}

std::vector<std::unique_ptr<Backend>> backends(int threads) {
  std::vector<std::unique_ptr<Backend>> out;
  out.push_back(make_cpu_backend(threads, CpuIsa::Scalar));
  for (CpuIsa isa : simd_isas()) out.push_back(make_cpu_backend(threads, isa));
  return out;
}

std::unique_ptr<Backend> best_backend(int threads) { return make_cpu_backend(threads, CpuIsa::Auto); }

// The same SIMD instruction sets as kernel tables, for testing each op on its own.
std::vector<const cpu::KernelTable*> simd_tables() {
  std::vector<const cpu::KernelTable*> out;
  for (const cpu::KernelTable* t : {cpu::avx2_kernels(), cpu::avx512_kernels()})
    if (t) out.push_back(t);
  return out;
}

}  // namespace

TEST_CASE("dtype traits follow the GGUF block layouts") {
  CHECK(traits(DType::Q4_0).block_bytes == 18);
  CHECK(traits(DType::Q4_1).block_bytes == 20);
  CHECK(traits(DType::Q8_0).block_bytes == 34);
  CHECK(traits(DType::Q8_1).block_bytes == 36);
  CHECK(traits(DType::BF16).block_bytes == 2);
  CHECK(row_bytes(DType::Q4_1, 576) == 18 * 20);
  CHECK(row_bytes(DType::F16, 7) == 14);
  CHECK_THROWS(row_bytes(DType::Q8_0, 33));
  CHECK(dtype_from_id(30) == DType::BF16);
  CHECK(dtype_from_id(9) == DType::Q8_1);
  CHECK(!dtype_from_id(4).has_value());
}

TEST_CASE("half conversions round to nearest even and round-trip") {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue;  // nan payloads
    CHECK_MESSAGE(fp32_to_fp16(fp16_to_fp32(static_cast<uint16_t>(h))) == h, "half ", h);
  }
  CHECK(fp16_to_fp32(0x3c00) == 1.0f);
  CHECK(fp16_to_fp32(0x0001) == 0x1p-24f);
  CHECK(fp32_to_fp16(1.0f + 0x1p-11f) == 0x3c00);      // tie -> even
  CHECK(fp32_to_fp16(1.0f + 3 * 0x1p-11f) == 0x3c02);  // tie -> even (up)
  CHECK(fp32_to_fp16(65520.0f) == 0x7c00);             // rounds to infinity
  CHECK(fp32_to_fp16(65519.0f) == 0x7bff);
  CHECK(fp32_to_fp16(0x1p-25f) == 0x0000);  // tie below the smallest subnormal -> 0
  CHECK(fp32_to_fp16(0x1.8p-25f) == 0x0001);
  CHECK(std::isnan(fp16_to_fp32(fp32_to_fp16(NAN))));
  CHECK(bf16_to_fp32(fp32_to_bf16(1.5f)) == 1.5f);
  CHECK(fp32_to_bf16(1.0f + 0x1p-8f) == 0x3f80);  // tie -> even
}

TEST_CASE("quantize_row and dequantize_row agree within each format's step") {
  const auto x = random_floats(256, 1);
  for (DType t : {DType::F16, DType::BF16, DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::Q8_1}) {
    std::vector<uint8_t> q(row_bytes(t, 256));
    std::vector<float> y(256);
    quantize_row(t, x.data(), q.data(), 256);
    dequantize_row(t, q.data(), y.data(), 256);
    // Half a step for data in [-1, 1]: Q4_1 1/15, Q8 1/127; Q4_0 maps -amax to -8
    // and so clips +amax to 7/8 of it (a full step).
    const float tol = t == DType::Q4_0 ? 0.13f : t == DType::Q4_1 ? 0.07f : t == DType::BF16 ? 4e-3f : 6e-3f;
    float worst = 0;
    for (int i = 0; i < 256; ++i) worst = std::max(worst, std::fabs(x[i] - y[i]));
    CHECK_MESSAGE(worst <= tol, traits(t).name, " worst ", worst);
  }
  // Nibble order: element j < 16 is the low nibble of byte j, j >= 16 the high one.
  uint8_t blk[20] = {};
  const uint16_t one = fp32_to_fp16(1.0f);
  std::memcpy(blk, &one, 2);  // d = 1, m = 0
  blk[4 + 3] = 0x52;          // element 3 = 2, element 19 = 5
  float v[32];
  dequantize_row(DType::Q4_1, blk, v, 32);
  CHECK(v[3] == 2.0f);
  CHECK(v[19] == 5.0f);
  CHECK(v[4] == 0.0f);
}

TEST_CASE("matmul matches a float reference within the activation quantization error") {
  // Activations are quantized to 8 bits per block of 32 (step amax/127, so each
  // element errs by at most amax/254) and their scale is rounded to f16 (relative
  // 2^-11): the bound below sums exactly those terms, plus float rounding.
  for (auto& be : backends(2)) {
    for (DType type : {DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::F16, DType::BF16, DType::F32}) {
      for (int64_t rows : {1, 5, 37}) {
        const int64_t cols = 96;
        const TestWeight w = make_weight(type, rows, cols, 7 + static_cast<uint32_t>(rows));
        for (int64_t nt = 1; nt <= 9; ++nt) {
          const auto x = random_floats(nt * cols, 100 + static_cast<uint32_t>(nt), -2.0f, 2.0f);
          std::vector<float> y(nt * rows, NAN);
          be->matmul(w.view, x.data(), nt, y.data());
          const bool quant = type == DType::Q4_0 || type == DType::Q4_1 || type == DType::Q8_0;
          for (int64_t t = 0; t < nt; ++t) {
            for (int64_t r = 0; r < rows; ++r) {
              double ref = 0, bound = 1e-5;
              for (int64_t b = 0; b < cols / 32; ++b) {
                float amax = 0, wmax = 0;
                for (int j = 0; j < 32; ++j) {
                  amax = std::max(amax, std::fabs(x[t * cols + b * 32 + j]));
                  wmax = std::max(wmax, std::fabs(w.values[r * cols + b * 32 + j]));
                }
                for (int j = 0; j < 32; ++j) {
                  const double wv = w.values[r * cols + b * 32 + j], xv = x[t * cols + b * 32 + j];
                  ref += wv * xv;
                  bound += quant ? std::fabs(wv) * amax / 254.0 + 1e-3 * (std::fabs(wv) + wmax) * std::fabs(xv)
                                 : 1e-6 * std::fabs(wv * xv);
                }
              }
              const float got = y[t * rows + r];
              CHECK_MESSAGE(std::fabs(got - ref) <= bound, be->name(), " ", traits(type).name, " rows ", rows,
                            " t ", t, "/", nt, " r ", r, " got ", got, " ref ", ref, " bound ", bound);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("the SIMD kernels agree with the scalar ones") {
  if (simd_isas().empty()) {
    MESSAGE("no SIMD kernels available on this CPU: skipped");
    return;
  }
  auto scalar = make_cpu_backend(1, CpuIsa::Scalar);
  auto close = [](const std::vector<float>& a, const std::vector<float>& b, const std::vector<float>& scale,
                  double rel) {
    for (size_t i = 0; i < a.size(); ++i)
      if (!(std::fabs(a[i] - b[i]) <= rel * scale[i] + 1e-30)) return false;
    return true;
  };
  for (CpuIsa isa : simd_isas()) {
    auto simd = make_cpu_backend(1, isa);
    CAPTURE(simd->name());
    SUBCASE("matmul, relative 1e-4 of sum |w x|") {
      for (DType type : {DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::F16, DType::BF16, DType::F32}) {
        const int64_t rows = 67, cols = 576, nt = 9;
        const TestWeight w = make_weight(type, rows, cols, 3);
        const auto x = random_floats(nt * cols, 4, -3.0f, 3.0f);
        std::vector<float> ys(nt * rows), yv(nt * rows), mag(nt * rows);
        for (int64_t t = 0; t < nt; ++t)
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < cols; ++c)
              mag[t * rows + r] += std::fabs(w.values[r * cols + c] * x[t * cols + c]);
        for (int64_t n = 1; n <= nt; ++n) {
          scalar->matmul(w.view, x.data(), n, ys.data());
          simd->matmul(w.view, x.data(), n, yv.data());
          std::vector<float> a(ys.begin(), ys.begin() + n * rows), b(yv.begin(), yv.begin() + n * rows);
          CHECK_MESSAGE(close(a, b, mag, 1e-4), traits(type).name, " n_tokens ", n);
        }
      }
    }
    SUBCASE("elementwise ops, relative 1e-5") {
      const int64_t n = 1000;  // not a multiple of the vector width
      const auto g = random_floats(n, 5, -20.0f, 20.0f), u = random_floats(n, 6);
      std::vector<float> a(n), b(n), mag(n);
      scalar->silu_mul(g.data(), u.data(), a.data(), n);
      simd->silu_mul(g.data(), u.data(), b.data(), n);
      for (int64_t i = 0; i < n; ++i) mag[i] = std::fabs(a[i]) + 1e-30f;
      CHECK(close(a, b, mag, 1e-5));
      const auto w = random_floats(n, 7);
      scalar->rmsnorm(g.data(), w.data(), a.data(), 1, n, 1e-5f);
      simd->rmsnorm(g.data(), w.data(), b.data(), 1, n, 1e-5f);
      for (int64_t i = 0; i < n; ++i) mag[i] = std::fabs(a[i]);
      CHECK(close(a, b, mag, 1e-5));
      a = g, b = g;
      scalar->add(a.data(), u.data(), n);
      simd->add(b.data(), u.data(), n);
      CHECK(a == b);
    }
  }
}

TEST_CASE("elementwise ops and quantize_act of every SIMD table against scalar, odd lengths") {
  // The tolerances of "the SIMD kernels agree with the scalar ones" (relative 1e-5;
  // add exact), here for every length class a vector loop can get wrong: shorter
  // than one register, one short of it, one past it, many plus a tail.
  const cpu::KernelTable& ref = cpu::kScalarKernels;
  for (const cpu::KernelTable* t : simd_tables()) {
    const std::string isa = t->isa;
    CAPTURE(isa);
    for (int64_t n : {1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 63, 65, 576, 1001, 1536}) {
      CAPTURE(n);
      const auto g = random_floats(n, 80 + uint32_t(n), -20.0f, 20.0f);
      const auto u = random_floats(n, 81), w = random_floats(n, 82);
      std::vector<float> a(n + 1, 7.0f), b(n + 1, 7.0f);  // one past n: must stay untouched
      ref.silu_mul(g.data(), u.data(), a.data(), n);
      t->silu_mul(g.data(), u.data(), b.data(), n);
      for (int64_t i = 0; i < n; ++i)
        CHECK_MESSAGE(std::fabs(a[i] - b[i]) <= 1e-5 * std::fabs(a[i]) + 1e-30, "silu_mul ", i);
      CHECK(b[n] == 7.0f);
      ref.gelu_mul(g.data(), u.data(), a.data(), n);
      t->gelu_mul(g.data(), u.data(), b.data(), n);
      // Relative 5e-5: exp's argument, 1.6 (x + 0.044715 x^3), is up to about 70
      // where the product is still above 1e-30, and one float step of it is
      // there a relative 4e-6 of exp.
      for (int64_t i = 0; i < n; ++i)
        CHECK_MESSAGE(std::fabs(a[i] - b[i]) <= 5e-5 * std::fabs(a[i]) + 1e-30, "gelu_mul ", i);
      CHECK(b[n] == 7.0f);
      ref.rmsnorm_row(g.data(), w.data(), a.data(), n, 1e-5f);
      t->rmsnorm_row(g.data(), w.data(), b.data(), n, 1e-5f);
      for (int64_t i = 0; i < n; ++i)
        CHECK_MESSAGE(std::fabs(a[i] - b[i]) <= 1e-5 * std::fabs(a[i]), "rmsnorm ", i);
      CHECK(b[n] == 7.0f);
      std::copy(g.begin(), g.end(), a.begin());
      std::copy(g.begin(), g.end(), b.begin());
      ref.add(a.data(), u.data(), n);
      t->add(b.data(), u.data(), n);
      CHECK(a == b);
    }
    // The activation quantization feeds integer dots: the same bits as scalar, zero blocks included.
    for (DType type : {DType::Q4_0, DType::Q4_1, DType::Q8_0})
      for (int64_t n : {32, 64, 576, 1536}) {
        auto x = random_floats(n, 90 + uint32_t(n), -3.0f, 3.0f);
        std::fill(x.begin(), x.begin() + 32, 0.0f);
        if (n >= 64) {  // block 1: amax 127, so x * 127 / amax = x: halves round to even
          x[41] = 127.0f;
          x[40] = 2.5f, x[42] = -3.5f, x[43] = 0.5f;
        }
        std::vector<cpu::ActTile> ta(n / 32), tb(n / 32);
        std::memset(ta.data(), 0x55, ta.size() * sizeof(cpu::ActTile));
        std::memset(tb.data(), 0x55, tb.size() * sizeof(cpu::ActTile));
        for (int slot = 0; slot < cpu::kActTileTokens; ++slot) {
          ref.quantize_act(type, x.data(), n, ta.data(), slot);
          t->quantize_act(type, x.data(), n, tb.data(), slot);
        }
        CHECK_MESSAGE(std::memcmp(ta.data(), tb.data(), ta.size() * sizeof(cpu::ActTile)) == 0, traits(type).name,
                      " n ", n);
      }
  }
}

TEST_CASE("softmax_exp and scale_probs of every SIMD table against scalar") {
  // exp within relative 1e-5 (as silu_mul), the double sum too; the scaling and
  // its f16 rounding are single roundings: exact.
  const cpu::KernelTable& ref = cpu::kScalarKernels;
  for (const cpu::KernelTable* t : simd_tables()) {
    const std::string isa = t->isa;
    CAPTURE(isa);
    for (int64_t n : {1, 2, 7, 15, 16, 17, 31, 33, 100, 640, 1001}) {
      for (float lo : {-30.0f, -300.0f}) {  // -300: most exponentials underflow
        CAPTURE(n);
        CAPTURE(lo);
        const auto s = random_floats(n, 100 + uint32_t(n), lo, 10.0f);
        std::vector<float> a(s), b(s);
        a.push_back(7.0f), b.push_back(7.0f);
        const double sa = ref.softmax_exp(a.data(), n), sb = t->softmax_exp(b.data(), n);
        CHECK(std::fabs(sa - sb) <= 1e-5 * sa);
        for (int64_t j = 0; j < n; ++j) CHECK_MESSAGE(std::fabs(a[j] - b[j]) <= 1e-5 * a[j] + 1e-30, "exp ", j);
        CHECK(b[n] == 7.0f);
        for (bool to_f16 : {false, true}) {
          std::vector<float> pa(a), pb(a);
          ref.scale_probs(pa.data(), n, float(1.0 / sa), to_f16);
          t->scale_probs(pb.data(), n, float(1.0 / sa), to_f16);
          CHECK_MESSAGE(pa == pb, "to_f16 ", to_f16);
        }
      }
    }
  }
}

TEST_CASE("attention scores and values of every SIMD table against scalar, over head sizes and ranges") {
  // Dot products summed in another order: within relative 1e-4 of the sum of
  // |terms|, the matmul's bound. Ranges start and end inside blocks, cross them
  // (block sizes 16 and 5), are shorter than and not multiples of a register or
  // of the kernels' 32-position chunks; query counts cover every tile shape
  // (AVX-512: scores 1 to 4 per pass, values 1 to 8; more take several passes
  // over f16 rows converted to float).
  // head_dim 12 and 264 take the scalar path.
  const cpu::KernelTable& ref = cpu::kScalarKernels;
  const std::pair<int32_t, int32_t> ranges[] = {{0, 1}, {0, 15}, {0, 16}, {0, 17}, {3, 40},
                                                {13, 45}, {31, 33}, {100, 229}, {0, 300}};
  const int n_pos = 300;
  for (const cpu::KernelTable* t : simd_tables()) {
    const std::string isa = t->isa;
    CAPTURE(isa);
    for (int hd : {8, 24, 40, 64, 72, 128, 256, 12, 264}) {
      for (int n_kv : {1, 3}) {
        for (DType type : {DType::F16, DType::F32}) {
          for (int bs : {16, 5}) {
            CAPTURE(hd);
            CAPTURE(n_kv);
            CAPTURE(traits(type).name);
            CAPTURE(bs);
            const int n_blocks = (n_pos + bs - 1) / bs + 2;
            const size_t elems = size_t(n_blocks) * bs * n_kv * hd;
            std::vector<uint8_t> k(elems * row_bytes(type, 1)), v(k.size());
            const auto kf = random_floats(elems, 200 + uint32_t(hd)), vf = random_floats(elems, 300 + uint32_t(hd));
            for (size_t i = 0; i < elems; ++i) {
              if (type == DType::F16) {
                reinterpret_cast<uint16_t*>(k.data())[i] = fp32_to_fp16(kf[i]);
                reinterpret_cast<uint16_t*>(v.data())[i] = fp32_to_fp16(vf[i]);
              } else {
                reinterpret_cast<float*>(k.data())[i] = kf[i];
                reinterpret_cast<float*>(v.data())[i] = vf[i];
              }
            }
            std::vector<int32_t> table(n_blocks);
            std::iota(table.begin(), table.end(), 0);
            std::shuffle(table.begin(), table.end(), std::mt19937(uint32_t(hd * 7 + bs)));
            const KvLayerView kv{type, k.data(), v.data(), bs, n_kv, hd};
            auto at = [&](const std::vector<uint8_t>& mem, int32_t pos, int kvh, int c) {
              const size_t i = ((size_t(table[pos / bs]) * bs + pos % bs) * n_kv + kvh) * hd + c;
              return type == DType::F16 ? double(fp16_to_fp32(reinterpret_cast<const uint16_t*>(mem.data())[i]))
                                        : double(reinterpret_cast<const float*>(mem.data())[i]);
            };
            for (int nq : {1, 2, 3, 4, 5, 6, 7, 8, 9, 12}) {
              auto q = random_floats(size_t(nq) * hd, 400 + uint32_t(nq), -2.0f, 2.0f);
              for (auto& x : q) x = fp16_to_fp32(fp32_to_fp16(x));
              for (const auto& range : ranges) {
                const int32_t p0 = range.first, p1 = range.second, len = p1 - p0;
                const int kvh = (nq + p0) % n_kv;
                CAPTURE(nq);
                CAPTURE(p0);
                CAPTURE(p1);
                const int64_t ld = len + 3;  // the 3 past each row must stay untouched
                std::vector<float> sa(nq * ld, 7.0f), sb(nq * ld, 7.0f);
                ref.attn_scores(kv, table.data(), p0, p1, q.data(), nq, kvh, 0.125f, sa.data(), ld);
                t->attn_scores(kv, table.data(), p0, p1, q.data(), nq, kvh, 0.125f, sb.data(), ld);
                int64_t far = 0;
                for (int i = 0; i < nq; ++i) {
                  for (int32_t p = p0; p < p1; ++p) {
                    double mag = 0;
                    for (int c = 0; c < hd; ++c) mag += std::fabs(q[size_t(i) * hd + c] * at(k, p, kvh, c));
                    far += !(std::fabs(sa[i * ld + p - p0] - sb[i * ld + p - p0]) <= 1e-4 * 0.125 * mag);
                  }
                  for (int64_t j = len; j < ld; ++j) far += sb[i * ld + j] != 7.0f;
                }
                CHECK_MESSAGE(far == 0, "scores: ", far, " wrong");
                // Values: weights like probabilities, added to accumulators that are not zero.
                const auto w = random_floats(size_t(nq) * ld, 500 + uint32_t(len), 0.0f, 1.0f);
                const auto acc0 = random_floats(size_t(nq + 1) * hd, 600);
                std::vector<float> aa(acc0), ab(acc0);
                ref.attn_values(kv, table.data(), p0, p1, w.data(), ld, nq, kvh, aa.data());
                t->attn_values(kv, table.data(), p0, p1, w.data(), ld, nq, kvh, ab.data());
                far = 0;
                for (int i = 0; i < nq; ++i)
                  for (int c = 0; c < hd; ++c) {
                    double mag = std::fabs(acc0[size_t(i) * hd + c]);
                    for (int32_t p = p0; p < p1; ++p) mag += std::fabs(w[i * ld + p - p0] * at(v, p, kvh, c));
                    far += !(std::fabs(aa[size_t(i) * hd + c] - ab[size_t(i) * hd + c]) <= 1e-4 * mag);
                  }
                for (int c = 0; c < hd; ++c) far += ab[size_t(nq) * hd + c] != acc0[size_t(nq) * hd + c];
                CHECK_MESSAGE(far == 0, "values: ", far, " wrong");
              }
            }
          }
        }
      }
    }
  }
}

TEST_CASE("quantized matmul of every SIMD table against scalar, over shapes and token counts") {
  // AVX2 sums each row's dot in 8 float lanes: within relative 1e-4 of sum |w x|
  // of the scalar sum. AVX-512 forms each block's int32 dot whole and then rounds
  // like the scalar kernel, step by step: the scalar kernel's bits.
  const std::pair<int64_t, int64_t> shapes[] = {{1, 32}, {15, 64}, {16, 576}, {17, 96}, {67, 576},
                                                {40, 1536}, {192, 576}};
  const int64_t token_counts[] = {1, 2, 3, 4, 5, 7, 8, 9, 13, 17, 33};
  auto scalar = make_cpu_backend(2, CpuIsa::Scalar);
  for (CpuIsa isa : simd_isas()) {
    auto simd = make_cpu_backend(2, isa);
    for (DType type : {DType::Q4_0, DType::Q4_1, DType::Q8_0})
      for (const auto& shape : shapes)
        test_weights::check_matmul_matches_scalar(*scalar, *simd, isa == CpuIsa::Avx512, type, shape.first,
                                                  shape.second, 60 + static_cast<uint32_t>(shape.first + shape.second),
                                                  token_counts);
  }
}

TEST_CASE("float matmul of every SIMD table against scalar, over shapes, token counts and row splits") {
  // Relative 1e-4 of sum |w x| (only the summation order differs). The shapes
  // take every tail: rows not a multiple of 4, 16 or 32, rows past one block of
  // repacked panels (300 x 600) or longer than one block's budget (20 x 5000),
  // row lengths not a multiple of 2, 8, 16 or 32;
  // the token counts both sides of the few-token path and of a token tile.
  const std::pair<int64_t, int64_t> shapes[] = {{1, 8}, {15, 33}, {16, 64}, {17, 95}, {33, 576}, {67, 100},
                                                {300, 600}, {20, 5000}};
  const int64_t token_counts[] = {1, 2, 3, 4, 5, 9, 15, 16, 17, 23, 40};
  for (const cpu::KernelTable* t : simd_tables()) {
    const std::string isa = t->isa;
    CAPTURE(isa);
    for (DType type : {DType::F16, DType::BF16, DType::F32}) {
      const double rel = 1e-4;
      for (const auto& shape : shapes) {
        const int64_t rows = shape.first, cols = shape.second;  // plain variables: CHECK_MESSAGE's lambda names them
        const TestWeight w = make_weight(type, rows, cols, 90 + static_cast<uint32_t>(rows + cols));
        for (int64_t nt : token_counts) {
          const auto x = random_floats(nt * cols, 91 + static_cast<uint32_t>(nt), -3.0f, 3.0f);
          std::vector<float> ys(nt * rows), yv(nt * rows, NAN);
          cpu::kScalarKernels.matmul_float(w.view, x.data(), nt, ys.data(), rows, 0, rows, nullptr);
          // Two row ranges, split on a multiple of 16 as the backend splits them.
          const int64_t split = std::min(rows, (rows / 2 + 15) / 16 * 16);
          std::vector<float> scratch(t->matmul_float_scratch ? t->matmul_float_scratch(w.view, nt) : 0);
          t->matmul_float(w.view, x.data(), nt, yv.data(), rows, 0, split, scratch.data());
          t->matmul_float(w.view, x.data(), nt, yv.data(), rows, split, rows, scratch.data());
          int64_t far = 0;
          for (int64_t tok = 0; tok < nt; ++tok)
            for (int64_t r = 0; r < rows; ++r) {
              double mag = 0;
              for (int64_t c = 0; c < cols; ++c) mag += std::fabs(w.values[r * cols + c] * x[tok * cols + c]);
              far += !(std::fabs(ys[tok * rows + r] - yv[tok * rows + r]) <= rel * mag + 1e-30);
            }
          CHECK_MESSAGE(far == 0, traits(type).name, " ", rows, "x", cols, " t ", nt, ": ", far, " outside ", rel);
        }
      }
    }
  }
}

TEST_CASE("quantized matmul: Q4_0 rows whose every scale is negative (its sign bit set) match scalar") {
  // Q4_0 maps the element of largest magnitude to -8, so a row of positive
  // values gets negative scales: f16 bit patterns of 0x8000 and up, which the
  // AVX2 matvec widens two at a time (in a UBSan build an int overflow there stops the test).
  const int64_t rows = 8, cols = 64, nt = 1;  // one token: the matvec path, rows in pairs
  std::vector<float> src = random_floats(rows * cols, 5, 0.25f, 1.0f);
  const size_t rb = row_bytes(DType::Q4_0, cols);
  std::vector<uint8_t> bytes(rb * rows);
  for (int64_t r = 0; r < rows; ++r) quantize_row(DType::Q4_0, src.data() + r * cols, bytes.data() + r * rb, cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < cols / 32; ++b) {
      uint16_t d;
      std::memcpy(&d, bytes.data() + r * rb + b * 18, 2);
      REQUIRE(d >= 0x8000);
    }
  const WeightView view{DType::Q4_0, bytes.data(), rows, cols, rb};
  const auto x = random_floats(nt * cols, 6);
  std::vector<float> ys(nt * rows), yv(nt * rows, NAN);
  make_cpu_backend(1, CpuIsa::Scalar)->matmul(view, x.data(), nt, ys.data());
  for (CpuIsa isa : simd_isas()) {
    make_cpu_backend(1, isa)->matmul(view, x.data(), nt, yv.data());
    for (int64_t i = 0; i < nt * rows; ++i) CHECK(yv[i] == doctest::Approx(ys[i]).epsilon(1e-4));
  }
}

TEST_CASE("INFERD_CPU_ISA forces the instruction set of make_cpu_backend(threads)") {
  const char* prev = std::getenv("INFERD_CPU_ISA");
  const std::string saved = prev ? prev : "";
  setenv("INFERD_CPU_ISA", "scalar", 1);
  CHECK(make_cpu_backend(1)->name() == "cpu-scalar");
  if (!simd_isas().empty()) CHECK(make_cpu_backend(1, simd_isas().back())->name() != "cpu-scalar");  // explicit wins
  for (CpuIsa isa : simd_isas()) {
    const char* name = isa == CpuIsa::Avx2 ? "avx2" : "avx512";
    setenv("INFERD_CPU_ISA", name, 1);
    CHECK(make_cpu_backend(1)->name() == std::string("cpu-") + name);
  }
  setenv("INFERD_CPU_ISA", "avx9000", 1);
  CHECK_THROWS_AS(make_cpu_backend(1), std::invalid_argument);
  if (!cpu_isa_available(CpuIsa::Avx512)) {
    setenv("INFERD_CPU_ISA", "avx512", 1);
    CHECK_THROWS_AS(make_cpu_backend(1), std::invalid_argument);
  }
  if (prev)
    setenv("INFERD_CPU_ISA", saved.c_str(), 1);
  else
    unsetenv("INFERD_CPU_ISA");
}

TEST_CASE("matmul gives the same bits with 1 and 2 threads") {
  for (DType type : {DType::Q4_1, DType::Q8_0, DType::F16, DType::BF16})
    for (int64_t nt : {7, 40}) {  // float weights: the few-token and the many-token path
      const TestWeight w = make_weight(type, 301, 64, 9);
      const auto x = random_floats(nt * 64, 10);
      std::vector<float> y1(nt * 301), y2(nt * 301);
      best_backend(1)->matmul(w.view, x.data(), nt, y1.data());
      best_backend(2)->matmul(w.view, x.data(), nt, y2.data());
      CHECK_MESSAGE(y1 == y2, traits(type).name, " t ", nt);
    }
}

TEST_CASE("get_rows dequantizes the selected rows") {
  const TestWeight w = make_weight(DType::Q8_0, 10, 64, 11);
  auto be = best_backend(1);
  const int32_t ids[3] = {9, 0, 9};
  std::vector<float> out(3 * 64);
  be->get_rows(w.view, ids, 3, out.data());
  for (int t = 0; t < 3; ++t)
    for (int c = 0; c < 64; ++c) CHECK(out[t * 64 + c] == w.values[ids[t] * 64 + c]);
  const int32_t bad = 10;
  CHECK_THROWS_AS(be->get_rows(w.view, &bad, 1, out.data()), std::out_of_range);
}

TEST_CASE("rmsnorm, silu_mul, gelu_mul, scale and add match their definitions") {
  for (auto& be : backends(2)) {
    const int64_t rows = 3, n = 576;
    const auto x = random_floats(rows * n, 12, -4.0f, 4.0f), w = random_floats(n, 13);
    std::vector<float> y(rows * n);
    be->rmsnorm(x.data(), w.data(), y.data(), rows, n, 1e-5f);
    for (int64_t r = 0; r < rows; ++r) {
      double ss = 0;
      for (int64_t i = 0; i < n; ++i) ss += double(x[r * n + i]) * x[r * n + i];
      const double scale = 1.0 / std::sqrt(ss / n + 1e-5);
      for (int64_t i = 0; i < n; ++i)
        CHECK(y[r * n + i] == doctest::Approx(x[r * n + i] * scale * w[i]).epsilon(1e-5));
    }
    std::vector<float> out(n);
    be->silu_mul(x.data(), w.data(), out.data(), n);
    for (int64_t i = 0; i < n; ++i)
      CHECK(out[i] == doctest::Approx(x[i] / (1.0 + std::exp(-double(x[i]))) * w[i]).epsilon(1e-5));
    be->gelu_mul(x.data(), w.data(), out.data(), n);
    for (int64_t i = 0; i < n; ++i) {  // transformers' gelu_pytorch_tanh, in double
      const double xi = x[i], gelu = 0.5 * xi * (1 + std::tanh(std::sqrt(2 / M_PI) * (xi + 0.044715 * xi * xi * xi)));
      CHECK(out[i] == doctest::Approx(gelu * w[i]).epsilon(1e-5));
    }
    std::vector<float> scaled(x.begin(), x.begin() + n);
    be->scale(scaled.data(), 4.5f, n);
    for (int64_t i = 0; i < n; ++i) CHECK(scaled[i] == x[i] * 4.5f);
    std::vector<float> acc(x.begin(), x.begin() + n);
    be->add(acc.data(), w.data(), n);
    for (int64_t i = 0; i < n; ++i) CHECK(acc[i] == x[i] + w[i]);
  }
}

TEST_CASE("rope rotates adjacent pairs (normal) or halves (neox) and leaves the rest") {
  const int heads = 3, hd = 16, nt = 4;
  const int32_t pos[nt] = {0, 1, 17, 100};
  for (bool neox : {false, true}) {
    RopeParams p;
    p.n_rot = 12;  // fewer than head_dim: dims 12..15 must not move
    p.freq_base = 10000.f;
    p.freq_scale = 0.5f;
    p.neox = neox;
    const auto x = random_floats(nt * heads * hd, 14);
    auto y = x;
    best_backend(1)->rope(y.data(), pos, nt, heads, hd, p);
    for (int t = 0; t < nt; ++t)
      for (int h = 0; h < heads; ++h) {
        const float* a = x.data() + (t * heads + h) * hd;
        const float* b = y.data() + (t * heads + h) * hd;
        for (int i = 0; i < p.n_rot / 2; ++i) {
          const double theta = pos[t] * p.freq_scale * std::pow(double(p.freq_base), -2.0 * i / p.n_rot);
          const int i0 = neox ? i : 2 * i, i1 = neox ? i + p.n_rot / 2 : 2 * i + 1;
          const double r0 = a[i0] * std::cos(theta) - a[i1] * std::sin(theta);
          const double r1 = a[i0] * std::sin(theta) + a[i1] * std::cos(theta);
          CHECK_MESSAGE(std::fabs(b[i0] - r0) < 1e-4, "neox ", neox, " t ", t, " i ", i);
          CHECK_MESSAGE(std::fabs(b[i1] - r1) < 1e-4, "neox ", neox, " t ", t, " i ", i);
        }
        for (int i = p.n_rot; i < hd; ++i) CHECK(b[i] == a[i]);
      }
  }
}

namespace {

// A paged KV cache with shuffled blocks, filled through kv_store, next to the
// dense values the kernels should read back.
struct TestCache {
  int block_size, n_kv, hd;
  DType type;
  std::vector<uint8_t> k, v;
  std::vector<int32_t> table;
  std::vector<float> dense_k, dense_v;  // [pos][kv_head][hd] as given to kv_store

  TestCache(Backend& be, DType t, int bs, int kvh, int head_dim, int n_pos, uint32_t seed)
      : block_size(bs), n_kv(kvh), hd(head_dim), type(t) {
    const int n_blocks = (n_pos + bs - 1) / bs + 3;
    const size_t elems = size_t(n_blocks) * bs * kvh * head_dim;
    k.assign(elems * row_bytes(t, 1), 0);
    v.assign(elems * row_bytes(t, 1), 0);
    table.resize(n_blocks);
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), std::mt19937(seed));
    dense_k = random_floats(size_t(n_pos) * kvh * head_dim, seed + 1);
    dense_v = random_floats(size_t(n_pos) * kvh * head_dim, seed + 2);
    std::vector<AttnToken> toks(n_pos);
    for (int p = 0; p < n_pos; ++p) toks[p] = AttnToken{table.data(), p};
    be.kv_store(view(), toks.data(), n_pos, dense_k.data(), dense_v.data());
  }
  KvLayerView view() { return KvLayerView{type, k.data(), v.data(), block_size, n_kv, hd}; }

  // The value stored for (position, kv head, i) as seen through a block table.
  double at(const std::vector<uint8_t>& mem, const int32_t* bt, int pos, int kvh, int i) const {
    const size_t idx = ((size_t(bt[pos / block_size]) * block_size + pos % block_size) * n_kv + kvh) * hd + i;
    if (type == DType::F16) return fp16_to_fp32(reinterpret_cast<const uint16_t*>(mem.data())[idx]);
    return reinterpret_cast<const float*>(mem.data())[idx];
  }

  // Dense softmax attention for query head h of a token at `pos` reading through
  // block table `bt`, in double except where the reference rounds: q and, for an
  // f16 cache, the normalized probabilities are rounded to f16. With extras, the
  // scores soft-capped and the positions before the window left out.
  std::vector<double> reference(const float* q, int n_heads, int h, const int32_t* bt, int pos, float scale,
                                const AttentionExtras& x = {}) const {
    const int kvh = h / (n_heads / n_kv);
    const int lo = x.window > 0 ? std::max(0, pos - x.window + 1) : 0;
    std::vector<double> s(pos + 1), out(hd, 0.0);
    double mx = -INFINITY, sum = 0;
    for (int p = lo; p <= pos; ++p) {
      double d = 0;
      for (int i = 0; i < hd; ++i) {
        const float qi = type == DType::F16 ? fp16_to_fp32(fp32_to_fp16(q[i])) : q[i];
        d += double(qi) * at(k, bt, p, kvh, i);
      }
      s[p] = x.softcap > 0 ? x.softcap * std::tanh(d * scale / x.softcap) : d * scale;
      mx = std::max(mx, s[p]);
    }
    // Like the reference: float exponentials, their sum in double, a float inverse.
    std::vector<float> e(pos + 1);
    for (int p = lo; p <= pos; ++p) sum += e[p] = std::exp(float(s[p] - mx));
    const float inv = float(1.0 / sum);
    for (int p = lo; p <= pos; ++p) {
      const double w = type == DType::F16 ? fp16_to_fp32(fp32_to_fp16(e[p] * inv)) : double(e[p]) * inv;
      for (int i = 0; i < hd; ++i) out[i] += w * at(v, bt, p, kvh, i);
    }
    return out;
  }

  // The largest difference between `out` (attention of tokens `use`) and reference().
  double worst_error(const std::vector<AttnToken>& use, const float* q, int n_heads, float scale,
                     const AttentionExtras& x, const std::vector<float>& out) const {
    double worst = 0;
    for (size_t t = 0; t < use.size(); ++t)
      for (int h = 0; h < n_heads; ++h) {
        const auto ref = reference(q + (t * n_heads + h) * hd, n_heads, h, use[t].block_table, use[t].pos, scale, x);
        for (int i = 0; i < hd; ++i) worst = std::max(worst, std::fabs(out[(t * n_heads + h) * hd + i] - ref[i]));
      }
    return worst;
  }
};

// An f16 probability may round the other way than in the reference (scores in
// double there): one f16 step of a probability, 2^-11, times |v| <= 1.
double attention_tolerance(DType type) { return type == DType::F16 ? 2e-5 + 0x1p-11 : 2e-5; }

}  // namespace

TEST_CASE("kv_store writes each token into its block-table slot") {
  for (DType type : {DType::F32, DType::F16}) {
    auto be = best_backend(1);
    TestCache c(*be, type, 4, 2, 8, 11, 21);
    for (int p = 0; p < 11; ++p)
      for (int h = 0; h < 2; ++h)
        for (int i = 0; i < 8; ++i) {
          const float want = c.dense_k[(size_t(p) * 2 + h) * 8 + i];
          CHECK(c.at(c.k, c.table.data(), p, h, i) ==
                (type == DType::F16 ? fp16_to_fp32(fp32_to_fp16(want)) : want));
        }
  }
}

TEST_CASE("attention over shuffled blocks matches dense softmax attention, plain and windowed with capped scores") {
  const int hd = 64;
  const float scale = 0.125f;
  for (const auto& heads : {std::pair{6, 2}, std::pair{4, 4}, std::pair{8, 1}}) {
    const int n_heads = heads.first, n_kv = heads.second;  // clang 14 can't capture a structured binding
    for (int threads : {1, 2}) {
      for (auto& be : backends(threads)) {
        for (DType type : {DType::F16, DType::F32}) {
          for (int bs : {16, 5}) {
            const int n_pos = 700;  // long enough to split decode over positions with 2 threads
            TestCache c(*be, type, bs, n_kv, hd, n_pos, 31 + bs);
            // A second sequence reads the same blocks in another order.
            std::vector<int32_t> other(c.table.rbegin(), c.table.rend());
            // Prefill chunks of two sequences in one step (positions 0..8 and
            // 600..607, then 3 tokens of the other sequence), and a lone decode token.
            std::vector<AttnToken> toks;
            for (int p : {0, 1, 2, 3, 4, 5, 6, 7, 8, 600, 601, 602, 603, 604, 605, 606, 607})
              toks.push_back({c.table.data(), p});
            for (int p : {40, 41, 42}) toks.push_back({other.data(), p});
            // Decode tokens at a short context (one slice) and a long one (split
            // over positions when there are two threads).
            for (int decode : {0, 1, 2}) {
              const std::vector<AttnToken> use =
                  decode == 1 ? std::vector<AttnToken>{{c.table.data(), 37}}
                  : decode == 2 ? std::vector<AttnToken>{{c.table.data(), n_pos - 1}}
                                : toks;
              const size_t n = use.size();
              const auto q = random_floats(n * n_heads * hd, 41, -2.0f, 2.0f);
              const int64_t reach = launch_keys::attention_reach(use.data(), int64_t(n));
              // Plain, then scores soft-capped (binding: they reach about 3) within
              // a window shorter than the prefill chunks' contexts.
              for (const AttentionExtras x : {AttentionExtras{}, AttentionExtras{1.5f, 37}}) {
                std::vector<float> out(n * n_heads * hd, NAN);
                if (x.window == 0)
                  be->attention(c.view(), use.data(), int64_t(n), reach, q.data(), n_heads, scale, out.data());
                else
                  be->attention_extra(c.view(), use.data(), int64_t(n), reach, q.data(), n_heads, scale, x, out.data());
                const double worst = c.worst_error(use, q.data(), n_heads, scale, x, out);
                CHECK_MESSAGE(worst < attention_tolerance(type), be->name(), " heads ", n_heads, "/", n_kv, " threads ", threads, " ",
                              traits(type).name, " bs ", bs, " decode ", decode, " window ", x.window, " worst ", worst);
              }
            }
          }
        }
      }
    }
  }
}

TEST_CASE("windowed attention at a long context reads only the window") {
  // 3000 positions, a window of 64 (one slice) and of 600 (decode split over
  // positions with two threads): a decode token at the end, a prefill chunk of
  // two tiles near it, and one at the start where the window holds everything.
  const int hd = 64, n_pos = 3000;
  const float scale = 0.125f;
  for (const auto& heads : {std::pair{8, 2}, std::pair{4, 1}}) {
    const int n_heads = heads.first, n_kv = heads.second;
    for (int threads : {1, 2}) {
      for (auto& be : backends(threads)) {
        for (DType type : {DType::F16, DType::F32}) {
          for (int window : {64, 600}) {
            const AttentionExtras x{0, window};
            TestCache c(*be, type, 16, n_kv, hd, n_pos, 51);
            std::vector<std::vector<AttnToken>> sets(3);
            sets[0] = {{c.table.data(), n_pos - 1}};
            for (int p = 2900; p < 2908; ++p) sets[1].push_back({c.table.data(), p});
            for (int p = 0; p < 6; ++p) sets[2].push_back({c.table.data(), p});
            auto run = [&](const std::vector<AttnToken>& use, const std::vector<float>& q) {
              std::vector<float> out(use.size() * n_heads * hd, NAN);
              be->attention_extra(c.view(), use.data(), int64_t(use.size()),
                                  launch_keys::attention_reach(use.data(), int64_t(use.size())), q.data(), n_heads,
                                  scale, x, out.data());
              return out;
            };
            std::vector<std::vector<float>> qs, outs;
            for (const auto& use : sets) {
              qs.push_back(random_floats(use.size() * n_heads * hd, 61, -2.0f, 2.0f));
              outs.push_back(run(use, qs.back()));
              const double worst = c.worst_error(use, qs.back().data(), n_heads, scale, x, outs.back());
              CHECK_MESSAGE(worst < attention_tolerance(type), be->name(), " heads ", n_heads, "/", n_kv, " threads ",
                            threads, " ", traits(type).name, " window ", window, " first pos ", use[0].pos,
                            " worst ", worst);
            }
            // NaN keys and values before every window of the first two sets: any
            // read of them would reach the output.
            const int poisoned = 2900 + 1 - window;
            const std::vector<float> nans(size_t(poisoned) * n_kv * hd, NAN);
            std::vector<AttnToken> before(poisoned);
            for (int p = 0; p < poisoned; ++p) before[p] = {c.table.data(), p};
            be->kv_store(c.view(), before.data(), poisoned, nans.data(), nans.data());
            for (int s = 0; s < 2; ++s)
              CHECK_MESSAGE(run(sets[s], qs[s]) == outs[s], be->name(), " heads ", n_heads, "/", n_kv, " threads ",
                            threads, " ", traits(type).name, " window ", window, " first pos ", sets[s][0].pos);
          }
        }
      }
    }
  }
}

TEST_CASE("attention rounds the probabilities to f16 for an f16 cache, like the reference") {
  // Three equal scores: p = 1/3 each, which is 0.33325195 in f16. With V = 1000
  // the output is 3 * 0.33325195 * 1000 = 999.756 rather than 1000.
  for (auto& be : backends(1)) {
    for (DType type : {DType::F16, DType::F32}) {
      const int hd = 8;
      std::vector<uint8_t> k(16 * hd * row_bytes(type, 1)), v(k.size());
      int32_t table[1] = {0};
      const KvLayerView kv{type, k.data(), v.data(), 16, 1, hd};
      const std::vector<float> zeros(hd, 0.0f), thousands(hd, 1000.0f);
      for (int p = 0; p < 3; ++p) {
        const AttnToken tok{table, p};
        be->kv_store(kv, &tok, 1, zeros.data(), thousands.data());
      }
      const std::vector<float> q(hd, 1.0f);
      std::vector<float> out(hd);
      const AttnToken tok{table, 2};
      be->attention(kv, &tok, 1, 3, q.data(), 1, 1.0f, out.data());
      const double want = type == DType::F16 ? 3 * 1000.0 * fp16_to_fp32(fp32_to_fp16(1.0f / 3)) : 1000.0;
      CHECK_MESSAGE(std::fabs(out[0] - want) < 1e-3, be->name(), " ", traits(type).name, " got ", out[0]);
    }
  }
}

TEST_CASE("thread pool runs every task once, on several threads, after idle sleeps too") {
  ThreadPool pool(2);
  CHECK(pool.size() == 2);
  for (int round = 0; round < 200; ++round) {
    const int n = 1 + round % 37;
    std::vector<std::atomic<int>> hits(n);
    std::atomic<int> bad_thread{0};
    pool.parallel_for(n, [&](int64_t task, int thread) {
      hits[task].fetch_add(1);
      if (thread < 0 || thread >= 2) bad_thread.fetch_add(1);
    });
    for (auto& h : hits) REQUIRE(h.load() == 1);
    CHECK(bad_thread.load() == 0);
    // Some rounds wait past the spin budget, so the workers sleep on the futex.
    if (round % 50 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(3));
  }
  // The caller holds the first task until a worker has taken the other (bounded,
  // so a machine too busy to schedule the worker fails instead of hanging).
  std::atomic<int> on_worker{0};
  pool.parallel_for(2, [&](int64_t, int thread) {
    if (thread == 1) on_worker.fetch_add(1);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (thread == 0 && on_worker.load() == 0 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  CHECK(on_worker.load() == 1);
}

TEST_CASE("thread pool: a job that never ends stops between tasks once cancelled, and the pool works on") {
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    ThreadPool pool(threads);
    std::atomic<bool> cancel{false};
    pool.set_cancel_flag(&cancel);
    std::atomic<int64_t> ran{0};
    std::thread canceller([&] {
      while (ran.load() < 1000) std::this_thread::yield();
      cancel = true;
    });
    CHECK_THROWS_AS(pool.parallel_for(std::numeric_limits<int64_t>::max() / 2, [&](int64_t, int) { ran.fetch_add(1); }),
                    Cancelled);
    canceller.join();
    const int64_t at_cancel = ran.load();
    CHECK(at_cancel >= 1000);
    cancel = false;
    std::vector<std::atomic<int>> hits(64);
    pool.parallel_for(64, [&](int64_t t, int) { hits[t].fetch_add(1); });
    for (auto& h : hits) CHECK(h.load() == 1);
    CHECK(ran.load() == at_cancel);  // nothing of the cancelled job ran after it returned
  }
}

#if INFERD_FAULTS
TEST_CASE("cpu backend: a matmul stuck in its loop (kernel.spin) throws Cancelled once the step is cancelled") {
  auto be = make_cpu_backend(2);
  std::atomic<bool> cancel{false};
  be->set_cancel_flag(&cancel);
  const int64_t rows = 64, cols = 64;
  const TestWeight tw = make_weight(DType::Q8_0, rows, cols, 7);
  const WeightView& w = tw.view;
  std::vector<float> x(cols, 1.f), y(rows);
  be->matmul(w, x.data(), 1, y.data());
  const float want = y[rows - 1];
  inferd::faults::arm_fault("kernel.spin");
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    cancel = true;
  });
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(be->matmul(w, x.data(), 1, y.data()), Cancelled);
  canceller.join();
  CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(200));
  CHECK(inferd::faults::armed_faults().empty());  // it fires once
  cancel = false;
  std::fill(y.begin(), y.end(), 0.f);
  be->matmul(w, x.data(), 1, y.data());
  CHECK(y[rows - 1] == want);
}
#endif

TEST_CASE("shape registry: first use, counts, seal makes new keys cold") {
  ShapeRegistry reg;
  const ShapeKey a{"matmul.q4_1", "n=576,k=576,t=1"};
  CHECK(reg.touch(a, 0.5));
  CHECK_FALSE(reg.touch(a, 0.1));
  CHECK(reg.seen(a));
  auto snap = reg.snapshot();
  REQUIRE(snap.size() == 1);
  CHECK(snap[0].second.count == 2);
  CHECK(snap[0].second.first_cost_s == 0.5);
  CHECK_FALSE(snap[0].second.cold);

  const LaunchKey lk{"matmul.q8_0", "n,k,t", {49152, 576, 8}};
  CHECK(lk.key() == ShapeKey{"matmul.q8_0", "n=49152,k=576,t=8"});
  for (int i = 0; i < 5; ++i) LaunchScope s(lk, reg);
  CHECK(reg.seen(lk.key()));

  std::vector<std::string> hooked;
  reg.seal([&](const ShapeKey& k) { hooked.push_back(k.str()); });
  { LaunchScope s(lk, reg); }  // seen before sealing: not cold
  CHECK(reg.cold_count() == 0);
  { LaunchScope s(LaunchKey{"rmsnorm", "n,t", {576, 1}}, reg); }
  { LaunchScope s(LaunchKey{"rmsnorm", "n,t", {576, 1}}, reg); }
  CHECK(reg.cold_count() == 1);
  REQUIRE(hooked.size() == 1);
  CHECK(hooked[0] == "rmsnorm[n=576,t=1]");
  for (const auto& [key, use] : reg.snapshot()) {
    if (key.op == "matmul.q8_0") CHECK(use.count == 6);
    if (key.op == "rmsnorm") CHECK(use.cold);
  }

  reg.unseal();
  reg.clear();
  CHECK(reg.snapshot().empty());
  { LaunchScope s(lk, reg); }  // cached before clear(): must register again
  CHECK(reg.seen(lk.key()));
  CHECK(reg.snapshot().size() == 1);
}

TEST_CASE("backend launches register bucketed shape keys") {
  const TestWeight w = make_weight(DType::Q4_1, 12, 64, 51);
  const auto x = random_floats(5 * 64, 52);
  std::vector<float> y(5 * 12);
  best_backend(1)->matmul(w.view, x.data(), 5, y.data());
  CHECK(ShapeRegistry::global().seen(ShapeKey{"matmul.q4_1", "n=12,k=64,t=8"}));
}
