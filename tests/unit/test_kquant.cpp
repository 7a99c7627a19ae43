// The 5-bit and k-quant GGUF types (Q5_0, Q5_1, Q4_K, Q5_K, Q6_K): dequantization
// bit for bit against the `gguf` package's (tests/golden/kquant_dequant.txt, from
// tools/make_kquant_fixture.py), the quantized matmul against a float reference,
// and every SIMD table against the scalar one.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/quantize.hpp"
#include "tests/unit/test_weights.hpp"

using namespace inferd::kernels;
using test_weights::make_weight;
using test_weights::random_floats;
using test_weights::TestWeight;

namespace {

const DType kNewTypes[] = {DType::Q5_0, DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::Q6_K};

std::string source_dir() {
  if (const char* s = std::getenv("INFERD_SOURCE_DIR")) return s;
  return INFERD_TEST_SOURCE_DIR;
}

std::vector<uint8_t> from_hex(const std::string& h) {
  std::vector<uint8_t> out(h.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(std::stoul(h.substr(2 * i, 2), nullptr, 16));
  return out;
}

// The row lengths the type takes: multiples of 256 for the k-quants.
int64_t cols_for(DType t, int64_t cols) { return (cols + traits(t).block_elems - 1) / traits(t).block_elems * traits(t).block_elems; }

}  // namespace

TEST_CASE("k-quant and 5-bit type ids, names and block sizes follow ggml") {
  const struct {
    uint32_t id;
    DType t;
    const char* name;
    int64_t elems;
    size_t bytes;
  } want[] = {{6, DType::Q5_0, "q5_0", 32, 22},
              {7, DType::Q5_1, "q5_1", 32, 24},
              {12, DType::Q4_K, "q4_k", 256, 144},
              {13, DType::Q5_K, "q5_k", 256, 176},
              {14, DType::Q6_K, "q6_k", 256, 210}};
  for (const auto& w : want) {
    REQUIRE(dtype_from_id(w.id) == w.t);
    CHECK(traits(w.t).name == w.name);
    CHECK(traits(w.t).block_elems == w.elems);
    CHECK(traits(w.t).block_bytes == w.bytes);
    CHECK(is_block_quantized(w.t));
  }
  CHECK_THROWS_AS(row_bytes(DType::Q4_K, 576), std::invalid_argument);  // not a whole number of 256
  CHECK(row_bytes(DType::Q6_K, 1536) == 6 * 210);
  CHECK_FALSE(dtype_from_id(10).has_value());  // Q2_K: not supported
}

TEST_CASE("dequantization equals the gguf package's, bit for bit") {
  std::ifstream in(source_dir() + "/tests/golden/kquant_dequant.txt");
  REQUIRE(in.good());
  std::string line;
  int records = 0;
  while (std::getline(in, line)) {
    std::istringstream head(line);
    std::string tag, name;
    uint32_t id = 0;
    int64_t n = 0;
    head >> tag >> name >> id >> n;
    REQUIRE(tag == "type");
    std::string bytes_line, values_line;
    REQUIRE(std::getline(in, bytes_line));
    REQUIRE(std::getline(in, values_line));
    REQUIRE(bytes_line.rfind("bytes ", 0) == 0);
    REQUIRE(values_line.rfind("values ", 0) == 0);
    const auto t = dtype_from_id(id);
    REQUIRE_MESSAGE(t.has_value(), name);
    const auto bytes = from_hex(bytes_line.substr(6));
    const auto want = from_hex(values_line.substr(7));  // big-endian hex of each float's bits
    REQUIRE(bytes.size() == row_bytes(*t, n));
    REQUIRE(want.size() == static_cast<size_t>(n) * 4);
    std::vector<float> got(n);
    dequantize_row(*t, bytes.data(), got.data(), n);
    int64_t differ = 0;
    for (int64_t i = 0; i < n; ++i) {
      uint32_t bits;
      std::memcpy(&bits, &got[i], 4);
      const uint32_t ref = uint32_t(want[4 * i]) << 24 | uint32_t(want[4 * i + 1]) << 16 |
                           uint32_t(want[4 * i + 2]) << 8 | want[4 * i + 3];
      differ += bits != ref;
    }
    CHECK_MESSAGE(differ == 0, name, ": ", differ, " of ", n, " values differ from gguf's");
    ++records;
  }
  CHECK(records == 5);
}

TEST_CASE("quantize_row and dequantize_row of the new types agree within each format's step") {
  for (DType t : kNewTypes) {
    const int64_t n = 512;
    const auto x = random_floats(n, 11);
    std::vector<uint8_t> q(row_bytes(t, n));
    std::vector<float> back(n);
    quantize_row(t, x.data(), q.data(), n);
    dequantize_row(t, q.data(), back.data(), n);
    // Steps for data in [-1, 1]: 5-bit 2/31, 4-bit (Q4_K: range / 15 with a 6-bit scale) 2/15, 6-bit 1/32.
    const float tol = t == DType::Q4_K ? 0.1f : t == DType::Q6_K ? 0.04f : 0.07f;
    for (int64_t i = 0; i < n; ++i) REQUIRE_MESSAGE(std::fabs(back[i] - x[i]) <= tol, traits(t).name, " at ", i);
  }
}

TEST_CASE("matmul of the new types matches a float reference within the activation quantization error") {
  for (CpuIsa isa : {CpuIsa::Scalar, CpuIsa::Avx2, CpuIsa::Avx512}) {
    if (!cpu_isa_available(isa)) continue;
    auto be = make_cpu_backend(2, isa);
    for (DType type : kNewTypes) {
      const int64_t rows = 21, cols = cols_for(type, 288);
      const TestWeight w = make_weight(type, rows, cols, 17);
      for (int64_t nt : {1, 3, 9}) {
        const auto x = random_floats(nt * cols, 200 + static_cast<uint32_t>(nt), -2.0f, 2.0f);
        std::vector<float> y(nt * rows, NAN);
        be->matmul(w.view, x.data(), nt, y.data());
        for (int64_t t = 0; t < nt; ++t)
          for (int64_t r = 0; r < rows; ++r) {
            double ref = 0, bound = 1e-5;
            for (int64_t b = 0; b < cols / 32; ++b) {
              float amax = 0;
              for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[t * cols + b * 32 + j]));
              for (int j = 0; j < 32; ++j) {
                const double wv = w.values[r * cols + b * 32 + j], xv = x[t * cols + b * 32 + j];
                ref += wv * xv;
                bound += std::fabs(wv) * amax / 254.0 + 2e-3 * std::fabs(wv * xv) + 1e-3 * amax * std::fabs(xv) / 16;
              }
            }
            const float got = y[t * rows + r];
            CHECK_MESSAGE(std::fabs(got - ref) <= bound, be->name(), " ", traits(type).name, " t ", t, " r ", r,
                          " got ", got, " ref ", ref, " bound ", bound);
          }
      }
    }
  }
}

TEST_CASE("quantized matmul of the new types: every SIMD table against scalar") {
  // AVX2 sums in float lanes of its own order: within relative 1e-4 of sum |w x|.
  // AVX-512 forms each block's int32 dot whole and rounds like the scalar
  // kernel, step by step: the scalar kernel's bits.
  const std::pair<int64_t, int64_t> shapes[] = {{1, 256}, {15, 64}, {17, 576}, {40, 1536}, {67, 512}};
  const int64_t token_counts[] = {1, 2, 4, 5, 9, 17};
  auto scalar = make_cpu_backend(2, CpuIsa::Scalar);
  for (CpuIsa isa : {CpuIsa::Avx2, CpuIsa::Avx512}) {
    if (!cpu_isa_available(isa)) continue;
    auto simd = make_cpu_backend(2, isa);
    for (DType type : kNewTypes)
      for (const auto& shape : shapes) {
        const int64_t rows = shape.first, cols = cols_for(type, shape.second);
        test_weights::check_matmul_matches_scalar(*scalar, *simd, isa == CpuIsa::Avx512, type, rows, cols,
                                                  90 + static_cast<uint32_t>(rows + cols), token_counts);
      }
  }
}

TEST_CASE("get_rows dequantizes rows of the new types") {
  auto be = make_cpu_backend(1, CpuIsa::Auto);
  for (DType type : kNewTypes) {
    const int64_t rows = 5, cols = 256;
    const TestWeight w = make_weight(type, rows, cols, 33);
    const int32_t ids[] = {4, 0, 2};
    std::vector<float> out(3 * cols);
    be->get_rows(w.view, ids, 3, out.data());
    for (int i = 0; i < 3; ++i)
      CHECK(std::memcmp(out.data() + i * cols, w.values.data() + ids[i] * cols, cols * sizeof(float)) == 0);
  }
}
