// Random test weights of any weight type, and the check every SIMD matmul
// table must pass against the scalar one (tests of kernels/cpu).
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/dtype.hpp"
#include "kernels/quantize.hpp"

namespace test_weights {

using inferd::kernels::DType;

inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// A weight matrix in `type` built from random floats, with its dequantized values.
struct TestWeight {
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // [rows][cols] as the kernels see them
  inferd::kernels::WeightView view;
};

inline TestWeight make_weight(DType type, int64_t rows, int64_t cols, uint32_t seed) {
  namespace k = inferd::kernels;
  TestWeight w;
  const auto src = random_floats(rows * cols, seed);
  const size_t rb = k::row_bytes(type, cols);
  w.bytes.resize(rb * rows);
  w.values.resize(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    k::quantize_row(type, src.data() + r * cols, w.bytes.data() + r * rb, cols);
    k::dequantize_row(type, w.bytes.data() + r * rb, w.values.data() + r * cols, cols);
  }
  w.view = k::WeightView{type, w.bytes.data(), rows, cols, rb};
  return w;
}

// `simd`'s matmul of a random `rows` x `cols` weight against `scalar`'s, for
// each token count: within relative 1e-4 of sum |w x| (a SIMD table may sum in
// float lanes of its own order), and bit for bit where `bit_exact`.
inline void check_matmul_matches_scalar(inferd::kernels::Backend& scalar, inferd::kernels::Backend& simd,
                                        bool bit_exact, DType type, int64_t rows, int64_t cols, uint32_t seed,
                                        std::span<const int64_t> token_counts) {
  const TestWeight w = make_weight(type, rows, cols, seed);
  for (int64_t nt : token_counts) {
    const auto x = random_floats(nt * cols, 70 + static_cast<uint32_t>(nt), -3.0f, 3.0f);
    std::vector<float> ys(nt * rows), yv(nt * rows, NAN);
    scalar.matmul(w.view, x.data(), nt, ys.data());
    simd.matmul(w.view, x.data(), nt, yv.data());
    int64_t far = 0, differ = 0;
    for (int64_t t = 0; t < nt; ++t)
      for (int64_t r = 0; r < rows; ++r) {
        double mag = 0;
        for (int64_t c = 0; c < cols; ++c) mag += std::fabs(w.values[r * cols + c] * x[t * cols + c]);
        const float a = ys[t * rows + r], b = yv[t * rows + r];
        far += !(std::fabs(a - b) <= 1e-4 * mag);
        differ += std::memcmp(&a, &b, sizeof a) != 0;
      }
    const auto name = inferd::kernels::traits(type).name;
    CHECK_MESSAGE(far == 0, simd.name(), " ", name, " ", rows, "x", cols, " t ", nt, ": ", far, " outside 1e-4");
    if (bit_exact)
      CHECK_MESSAGE(differ == 0, name, " ", rows, "x", cols, " t ", nt, ": ", differ, " differ from scalar");
  }
}

}  // namespace test_weights
