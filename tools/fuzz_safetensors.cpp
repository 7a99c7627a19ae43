// libFuzzer target for the safetensors header parser: any input must either load
// or fail with LoadError, and a loaded file's tensors must lie inside it, each
// its dtype's size times its elements, none sharing bytes.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <utility>
#include <vector>

#include "engine/safetensors_reader.hpp"

using inferd::engine::LoadError;
using inferd::engine::SafetensorsFile;

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::shared_ptr<SafetensorsFile> f;
  try {
    f = SafetensorsFile::open_memory(std::span(data, size), "fuzz");
  } catch (const LoadError&) {
    return 0;
  }
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& t : f->tensors()) {
    check(t.offset >= f->data_offset() && t.offset <= f->file_size() && t.nbytes <= f->file_size() - t.offset);
    check(uint64_t(t.elements()) * inferd::engine::safetensors_dtype_size(t.dtype) == t.nbytes);
    check(f->find(t.name) != nullptr);
    if (t.nbytes) ranges.emplace_back(t.offset, t.offset + t.nbytes);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) check(ranges[i - 1].second <= ranges[i].first);
  return 0;
}
