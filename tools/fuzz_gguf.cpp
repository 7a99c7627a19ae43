// libFuzzer target for the GGUF reader: any input must either load or fail with
// LoadError, and a loaded file must only point inside itself.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>

#include "engine/gguf_reader.hpp"

using inferd::engine::GgufFile;
using inferd::engine::GgufType;
using inferd::engine::LoadError;

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

// Reads every value through the getter its type calls for; a wrong-type read must
// be a LoadError too.
void touch_metadata(const GgufFile& f) {
  for (const auto& key : f.keys()) {
    try {
      switch (f.type_of(key)) {
        case GgufType::STRING: (void)f.get_string(key); break;
        case GgufType::F32: case GgufType::F64: (void)f.get_float(key); break;
        case GgufType::BOOL: (void)f.get_bool(key); break;
        case GgufType::ARRAY: (void)f.get_string_array(key); break;
        default: (void)f.get_int(key); break;
      }
    } catch (const LoadError&) {
    }
    try {
      (void)f.get_int_array(key);
    } catch (const LoadError&) {
    }
    try {
      (void)f.get_float_array(key);
    } catch (const LoadError&) {
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::unique_ptr<GgufFile> f;
  try {
    f = GgufFile::open_memory(std::span(data, size), "fuzz");
  } catch (const LoadError& e) {
    check(e.offset <= size);
    return 0;
  }
  touch_metadata(*f);
  for (const auto& t : f->tensors()) {
    check(t.offset >= f->data_offset() && t.offset % f->alignment() == 0);
    check(t.offset <= size && t.nbytes <= size - t.offset);
    check(std::memcmp(t.data, data + t.offset, t.nbytes) == 0);  // points at its own bytes
    check(f->find_tensor(t.name) == &t);
  }
  return 0;
}
