// The arrays of DeepSeek-V4's goldens: tests/golden/dsv4_quant.bin
// (tools/make_dsv4_quant_golden.py: the scaled weight formats and routed experts
// as PyTorch computes them), tests/golden/dsv4_forward.bin
// (tools/make_dsv4_forward_golden.py: a prefill through transformers' model)
// and tests/golden/dsv4_decode.bin (tools/make_dsv4_decode_golden.py: its
// greedy generation with its cache).
// Each is a text line "name dtype dim...", then its raw little-endian bytes.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/cpu/cpu_backend.hpp"

namespace dsv4_golden {

struct Array {
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
  template <class T>
  const T* as() const { return reinterpret_cast<const T*>(bytes.data()); }
  int64_t dim(size_t i) const { return shape.at(i); }
};

inline std::map<std::string, Array> read_arrays(const std::string& file) {
  const char* dir = std::getenv("INFERD_SOURCE_DIR");
  const std::string path = std::string(dir ? dir : INFERD_TEST_SOURCE_DIR) + "/tests/golden/" + file;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::map<std::string, Array> out;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string name, dtype;
    fields >> name >> dtype;
    Array a;
    size_t n = dtype == "u8" ? 1 : dtype == "f32" || dtype == "i32" ? 4 : 8;
    for (int64_t d; fields >> d;) a.shape.push_back(d), n *= static_cast<size_t>(d);
    a.bytes.resize(n);
    if (!in.read(reinterpret_cast<char*>(a.bytes.data()), static_cast<std::streamsize>(n)))
      throw std::runtime_error(path + ": array " + name + " truncated");
    out[name] = std::move(a);
  }
  return out;
}

// `file` in tests/golden, read once.
inline const Array& array(const std::string& name, const std::string& file = "dsv4_quant.bin") {
  static std::map<std::string, std::map<std::string, Array>> files;
  auto f = files.find(file);
  if (f == files.end()) f = files.emplace(file, read_arrays(file)).first;
  const auto it = f->second.find(name);
  if (it == f->second.end()) throw std::runtime_error("tests/golden/" + file + " has no array " + name);
  return it->second;
}

// A CPU backend of each instruction set this machine and build have.
inline std::vector<std::unique_ptr<inferd::kernels::Backend>> all_cpu_backends(int threads) {
  using inferd::kernels::CpuIsa;
  std::vector<std::unique_ptr<inferd::kernels::Backend>> out;
  for (CpuIsa isa : {CpuIsa::Scalar, CpuIsa::Avx2, CpuIsa::Avx512})
    if (inferd::kernels::cpu_isa_available(isa)) out.push_back(inferd::kernels::make_cpu_backend(threads, isa));
  return out;
}

}  // namespace dsv4_golden
