// DeepSeek-V4's scaled weight formats (kernels/scaled_weight.hpp): the e4m3fn,
// E8M0 and E2M1 decoders bit for bit, whole-weight dequantization and
// Backend::matmul_scaled on every instruction set against PyTorch
// (tests/golden/dsv4_quant.bin, from tools/make_dsv4_quant_golden.py), and the
// SIMD tables against the scalar one on shapes with every tail.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/launch_keys.hpp"
#include "kernels/scaled_weight.hpp"
#include "tests/unit/dsv4_golden.hpp"

using namespace inferd::kernels;
using dsv4_golden::all_cpu_backends;
using dsv4_golden::Array;
using dsv4_golden::array;

namespace {

bool same_value(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  uint32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return x == y;  // -0 is not 0
}

ScaledWeightView fp8_view(const char* scales) {
  const Array& w = array("fp8_weight");
  const bool f32 = std::string(scales) == "fp8_scale_f32";
  return {ScaledFormat::Fp8Block, f32 ? ScaleType::F32 : ScaleType::E8M0, w.bytes.data(), array(scales).bytes.data(),
          w.dim(0), w.dim(1)};
}

ScaledWeightView mxfp4_view() {
  const Array& w = array("mxfp4_weight");
  return {ScaledFormat::Mxfp4, ScaleType::E8M0, w.bytes.data(), array("mxfp4_scale").bytes.data(), w.dim(0),
          w.dim(1) * 2};
}

// y of each backend, for the first n tokens of x, against `expect` within a
// float32 dot product's error: 1e-5 of sum |W||x| per output (NaN where expected).
void check_matmul(const ScaledWeightView& w, const float* x, const float* expect) {
  std::vector<float> wd(static_cast<size_t>(w.rows * w.cols));
  dequantize(w, wd.data());
  const int64_t tokens = 3;
  for (auto& be : all_cpu_backends(2)) {
    for (int64_t n = 1; n <= tokens; ++n) {
      std::vector<float> y(static_cast<size_t>(n * w.rows), -1.0f);
      be->matmul_scaled(w, x, n, y.data());
      int bad = 0;
      for (int64_t t = 0; t < n; ++t)
        for (int64_t r = 0; r < w.rows; ++r) {
          double mag = 0;
          for (int64_t c = 0; c < w.cols; ++c) mag += std::fabs(double(wd[r * w.cols + c]) * x[t * w.cols + c]);
          const float got = y[t * w.rows + r], want = expect[t * w.rows + r];
          const bool ok = std::isnan(want) ? std::isnan(got) : std::fabs(double(got) - want) <= 1e-5 * mag + 1e-37;
          if (!ok && ++bad <= 3)
            FAIL_CHECK(be->name() << " " << std::string(format_name(w.format)) << " tokens " << n << " y[" << t << "]["
                                  << r << "] = " << got << ", torch " << want);
        }
      CHECK_MESSAGE(bad == 0, be->name(), " ", format_name(w.format), " tokens ", n, ": ", bad, " outputs off");
    }
  }
}

}  // namespace

TEST_CASE("e4m3fn, E8M0 and E2M1 decode bit for bit as torch does") {
  const float* e4m3 = array("e4m3_table").as<float>();
  const float* e8m0 = array("e8m0_table").as<float>();
  const float* e2m1 = array("e2m1_table").as<float>();
  for (int b = 0; b < 256; ++b) {
    CHECK_MESSAGE(same_value(e4m3fn_to_float(static_cast<uint8_t>(b)), e4m3[b]), "e4m3 byte ", b);
    CHECK_MESSAGE(same_value(e8m0_to_float(static_cast<uint8_t>(b)), e8m0[b]), "e8m0 byte ", b);
  }
  for (int c = 0; c < 16; ++c) CHECK_MESSAGE(same_value(e2m1_to_float(static_cast<uint8_t>(c)), e2m1[c]), "e2m1 ", c);
  CHECK(std::isnan(e4m3fn_to_float(0x7f)));
  CHECK(e4m3fn_to_float(0x01) == std::ldexp(1.0f, -9));  // the smallest subnormal
  CHECK(e8m0_to_float(0) == std::ldexp(1.0f, -127));
}

TEST_CASE("scaled weights dequantize to torch's values in their places") {
  // Row checksums sum_c W[r][c] * (c + 1) in double: a value in the wrong place
  // (nibble order, block of a scale) moves them far beyond rounding.
  const auto check = [](const ScaledWeightView& w, const char* sums) {
    std::vector<float> wd(static_cast<size_t>(w.rows * w.cols));
    dequantize(w, wd.data());
    const double* want = array(sums).as<double>();
    for (int64_t r = 0; r < w.rows; ++r) {
      double sum = 0;
      for (int64_t c = 0; c < w.cols; ++c) sum += double(wd[r * w.cols + c]) * double(c + 1);
      if (std::isnan(want[r]))
        CHECK_MESSAGE(std::isnan(sum), sums, " row ", r);
      else
        CHECK_MESSAGE(std::fabs(sum - want[r]) <= 1e-12 * std::fabs(want[r]) + 1e-300, sums, " row ", r);
    }
  };
  check(fp8_view("fp8_scale_e8m0"), "fp8_rowsum_e8m0");
  check(fp8_view("fp8_scale_f32"), "fp8_rowsum_f32");
  check(mxfp4_view(), "mxfp4_rowsum");
}

TEST_CASE("matmul_scaled matches torch on every instruction set") {
  check_matmul(fp8_view("fp8_scale_e8m0"), array("fp8_x").as<float>(), array("fp8_y_e8m0").as<float>());
  check_matmul(fp8_view("fp8_scale_f32"), array("fp8_x").as<float>(), array("fp8_y_f32").as<float>());
  check_matmul(mxfp4_view(), array("mxfp4_x").as<float>(), array("mxfp4_y").as<float>());
}

TEST_CASE("matmul_scaled: the SIMD tables match the scalar one on ragged shapes") {
  // cols 200: FP8 blocks of 128 and 72, the last not a multiple of 16; 9 tokens:
  // two tiles of four and one of one.
  std::mt19937 rng(7);
  auto scalar = make_cpu_backend(2, CpuIsa::Scalar);
  for (ScaledFormat f : {ScaledFormat::Fp8Block, ScaledFormat::Mxfp4}) {
    const int64_t rows = 37, cols = f == ScaledFormat::Mxfp4 ? 192 : 200, tokens = 9;
    ScaledWeightView w{f, ScaleType::E8M0, nullptr, nullptr, rows, cols};
    std::vector<uint8_t> data(data_bytes(w)), scales(scale_bytes(w));
    for (auto& b : data) b = static_cast<uint8_t>(rng() & 0xff);
    for (auto& b : data)
      if (f == ScaledFormat::Fp8Block && (b & 0x7f) == 0x7f) b = 0x30;
    for (auto& s : scales) s = static_cast<uint8_t>(120 + rng() % 10);
    w.data = data.data(), w.scales = scales.data();
    std::normal_distribution<float> nd;
    std::vector<float> x(static_cast<size_t>(tokens * cols));
    for (float& v : x) v = nd(rng);
    std::vector<float> want(static_cast<size_t>(tokens * rows));
    scalar->matmul_scaled(w, x.data(), tokens, want.data());
    for (auto& be : all_cpu_backends(2)) {
      std::vector<float> y(want.size());
      be->matmul_scaled(w, x.data(), tokens, y.data());
      float worst = 0, scale = 0;
      for (size_t i = 0; i < y.size(); ++i) worst = std::fmax(worst, std::fabs(y[i] - want[i]));
      for (float v : want) scale = std::fmax(scale, std::fabs(v));
      CHECK_MESSAGE(worst <= 1e-5f * scale, be->name(), " ", format_name(f), ": worst ", worst, " of ", scale);
    }
  }
}

TEST_CASE("matmul_scaled refuses views it cannot read, naming the field") {
  auto be = make_cpu_backend(1, CpuIsa::Auto);
  uint8_t bytes[64] = {};
  float x[48] = {}, y[2];
  ScaledWeightView w{ScaledFormat::Mxfp4, ScaleType::E8M0, bytes, bytes, 2, 48};
  CHECK_THROWS_WITH_AS(be->matmul_scaled(w, x, 1, y), doctest::Contains("cols 48 is not a multiple of 32"),
                       std::invalid_argument);
  w.cols = 32, w.scale_type = ScaleType::F32;
  CHECK_THROWS_WITH_AS(be->matmul_scaled(w, x, 1, y), doctest::Contains("scales must be E8M0"), std::invalid_argument);
  w = {ScaledFormat::Fp8Block, ScaleType::E8M0, bytes, nullptr, 2, 16};
  CHECK_THROWS_WITH_AS(be->matmul_scaled(w, x, 1, y), doctest::Contains("scales pointer is null"),
                       std::invalid_argument);
  CHECK(be->takes_scaled_format(ScaledFormat::Fp8Block));
  CHECK(std::string(launch_keys::matmul_scaled(w, 3).op) == "matmul.fp8_block");
}
