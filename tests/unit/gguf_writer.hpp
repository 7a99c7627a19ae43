// Builds GGUF files byte by byte for tests: valid ones and ones broken on purpose.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

#include "engine/gguf_reader.hpp"
#include "kernels/dtype.hpp"

// Writes GGUF fields in file order; pos() marks where a field lands so tests can
// name the offset an error must report.
struct GgufWriter {
  std::vector<uint8_t> b;
  // Reserved up front: GCC 12 warns falsely (-Wrestrict, -Wstringop-overflow) about
  // inserting into an empty vector once the calls are inlined.
  GgufWriter() { b.reserve(1 << 16); }

  uint64_t pos() const { return b.size(); }
  template <class T>
  GgufWriter& put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof v);
    return *this;
  }
  GgufWriter& u8(uint8_t v) { return put(v); }
  GgufWriter& u32(uint32_t v) { return put(v); }
  GgufWriter& u64(uint64_t v) { return put(v); }
  GgufWriter& str(std::string_view s) {
    u64(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  GgufWriter& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    return u32(0x46554747).u32(version).u64(n_tensors).u64(n_kv);  // "GGUF", little-endian
  }
  GgufWriter& key(std::string_view k, inferd::engine::GgufType t) { return str(k).u32(static_cast<uint32_t>(t)); }
  GgufWriter& kv_u32(std::string_view k, uint32_t v) { return key(k, inferd::engine::GgufType::U32).u32(v); }
  GgufWriter& kv_str(std::string_view k, std::string_view v) { return key(k, inferd::engine::GgufType::STRING).str(v); }
  GgufWriter& tensor(std::string_view name, std::vector<uint64_t> dims, inferd::kernels::DType type, uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) u64(d);
    return u32(static_cast<uint32_t>(type)).u64(offset);
  }
  GgufWriter& align(uint64_t a) {
    while (b.size() % a) b.push_back(0);
    return *this;
  }
  GgufWriter& bytes(size_t n, uint8_t v = 0) {
    b.insert(b.end(), n, v);
    return *this;
  }
};
