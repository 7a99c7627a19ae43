// The architectures' tiny fixtures and goldens (tests/golden/ARCH-tiny.gguf and
// ARCH_tiny.json, made by tools/make_qwen_golden.py and make_gemma_golden.py)
// for their unit tests: the checks against transformers and patched copies of
// a fixture for the load errors.
#pragma once
#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "tests/unit/golden_runner.hpp"
#include "tests/unit/test_paths.hpp"

namespace test_golden {

inline std::string fixture(const std::string& arch) {
  return test_paths::source_dir() + "/tests/golden/" + arch + "-tiny.gguf";
}

inline boost::json::object golden(const std::string& arch) {
  return read_golden(test_paths::source_dir() + "/tests/golden/" + arch + "_tiny.json");
}

inline void check_golden(const std::string& arch, engine::Precision p, double tol) {
  Runner r(fixture(arch), p);
  const bool exact = p == engine::Precision::Exact;
  check_cases(r, golden(arch), exact, tol, arch + (exact ? " exact" : " fast"));
}

// A little-endian u32 as the file holds it: a value, a type code or a length's low half.
inline std::string u32(uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); }

// A copy of a fixture with the bytes of `from` (once) replaced by `to`, the same length.
struct Patched {
  std::filesystem::path path;
  Patched(const std::string& arch, const std::string& from, const std::string& to) {
    REQUIRE(from.size() == to.size());
    std::string bytes = read_text(fixture(arch));
    const auto at = bytes.find(from);
    REQUIRE(at != std::string::npos);
    bytes.replace(at, from.size(), to);
    static int made = 0;  // several may exist at once
    path = std::filesystem::temp_directory_path() /
           ("inferd-" + arch + "-" + std::to_string(::getpid()) + "-" + std::to_string(++made) + ".gguf");
    std::ofstream(path, std::ios::binary) << bytes;
  }
  ~Patched() {
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
};

}  // namespace test_golden
