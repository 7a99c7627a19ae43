#include "engine/safetensors_reader.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <boost/json.hpp>
#include <boost/json/basic_parser_impl.hpp>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>
#include <set>

namespace inferd::engine {

static_assert(std::endian::native == std::endian::little, "the header length is read in place as little-endian");

namespace {

// Headers are a few hundred bytes per tensor; anything past this is not a header.
constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;
constexpr size_t kMaxDims = 8;

// Finds the first top-level key a JSON object repeats: boost::json keeps only
// the last of equal keys, which would hide a tensor named twice.
struct RepeatedKey {
  static constexpr std::size_t max_object_size = -1, max_array_size = -1, max_key_size = -1, max_string_size = -1;
  using ec_t = boost::system::error_code;
  using sv = boost::json::string_view;
  int depth = 0;
  std::string key;
  std::set<std::string, std::less<>> seen;
  std::optional<std::string> repeated;

  bool on_key_part(sv s, std::size_t, ec_t&) {
    if (depth == 1) key.append(s.data(), s.size());
    return true;
  }
  bool on_key(sv s, std::size_t n, ec_t& ec) {
    if (depth != 1) return true;
    on_key_part(s, n, ec);
    if (!seen.insert(key).second && !repeated) repeated = key;
    key.clear();
    return true;
  }
  bool on_object_begin(ec_t&) { return ++depth, true; }
  bool on_object_end(std::size_t, ec_t&) { return --depth, true; }
  bool on_document_begin(ec_t&) { return true; }
  bool on_document_end(ec_t&) { return true; }
  bool on_array_begin(ec_t&) { return true; }
  bool on_array_end(std::size_t, ec_t&) { return true; }
  bool on_string_part(sv, std::size_t, ec_t&) { return true; }
  bool on_string(sv, std::size_t, ec_t&) { return true; }
  bool on_number_part(sv, ec_t&) { return true; }
  bool on_int64(int64_t, sv, ec_t&) { return true; }
  bool on_uint64(uint64_t, sv, ec_t&) { return true; }
  bool on_double(double, sv, ec_t&) { return true; }
  bool on_bool(bool, ec_t&) { return true; }
  bool on_null(ec_t&) { return true; }
  bool on_comment_part(sv, ec_t&) { return true; }
  bool on_comment(sv, ec_t&) { return true; }
};

std::optional<std::string> repeated_key(const char* text, size_t n) {
  boost::json::basic_parser<RepeatedKey> p(boost::json::parse_options{});
  boost::system::error_code ec;
  p.write_some(false, text, n, ec);
  return p.handler().repeated;
}

}  // namespace

size_t safetensors_dtype_size(std::string_view dtype) {
  static constexpr std::pair<std::string_view, size_t> sizes[] = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"F8_E8M0", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
      {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4},     {"I64", 8},     {"U64", 8}, {"F64", 8},
  };
  for (const auto& [name, size] : sizes)
    if (name == dtype) return size;
  return 0;
}

int64_t SafetensorsTensor::elements() const {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
}

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  std::shared_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  try {
    f->take(map_file_readonly(path));
  } catch (const std::runtime_error& e) {
    f->fail(0, e.what());
  }
  f->parse();
  return f;
}

std::shared_ptr<SafetensorsFile> SafetensorsFile::open_memory(std::span<const uint8_t> bytes, std::string name) {
  std::shared_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = std::move(name);
  try {
    f->take(map_copy_readonly(bytes));
  } catch (const std::runtime_error& e) {
    f->fail(0, e.what());
  }
  f->parse();
  return f;
}

void SafetensorsFile::take(const MappedBytes& m) {
  mapping_ = m.mapping;
  base_ = m.base;
  size_ = m.size;
}

SafetensorsFile::~SafetensorsFile() {
  if (mapping_) ::munmap(mapping_, size_);
}

void SafetensorsFile::fail(uint64_t offset, const std::string& message) const {
  throw LoadError(path_, offset, message);
}

const SafetensorsTensor* SafetensorsFile::find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

void SafetensorsFile::parse() {
  if (size_ < 8) fail(0, "file of " + std::to_string(size_) + " bytes is too short for the 8-byte header length");
  uint64_t n = 0;
  std::memcpy(&n, base_, 8);
  if (n > size_ - 8)
    fail(0, "header length " + std::to_string(n) + " exceeds the " + std::to_string(size_ - 8) +
                " bytes after it: not a safetensors file");
  if (n > kMaxHeaderBytes) fail(0, "header length " + std::to_string(n) + " is over the 100 MiB limit");
  if (n < 2) fail(0, "header length " + std::to_string(n) + " is too short for a JSON object");
  data_offset_ = 8 + n;
  const uint64_t data_bytes = size_ - data_offset_;

  // The header, parsed with the error's position kept for the report.
  boost::json::stream_parser p;
  boost::system::error_code ec;
  const char* text = reinterpret_cast<const char*>(base_ + 8);
  const size_t used = p.write_some(text, n, ec);
  if (!ec) p.finish(ec);
  if (ec) fail(8 + used, "header is not valid JSON: " + ec.message());
  const boost::json::value header = p.release();
  if (!header.is_object()) fail(8, "header is not a JSON object");
  if (const auto twice = repeated_key(text, n)) fail(8, "tensor '" + *twice + "': named twice in the header");

  struct Range {
    uint64_t begin, end;
    size_t tensor;
  };
  std::vector<Range> ranges;
  for (const auto& [key, entry] : header.as_object()) {
    const std::string name(key);
    if (name == "__metadata__") continue;
    const std::string what = "tensor '" + name + "': ";
    // Header positions of keys are not kept by the parser; errors give the header's start.
    if (!entry.is_object()) fail(8, what + "entry is not an object");
    const auto& o = entry.as_object();
    const auto* dtype = o.if_contains("dtype");
    const auto* shape = o.if_contains("shape");
    const auto* offsets = o.if_contains("data_offsets");
    if (!dtype || !dtype->is_string()) fail(8, what + "'dtype' is missing or not a string");
    if (!shape || !shape->is_array()) fail(8, what + "'shape' is missing or not an array");
    if (!offsets || !offsets->is_array() || offsets->as_array().size() != 2)
      fail(8, what + "'data_offsets' is missing or not a [begin, end] pair");
    SafetensorsTensor t;
    t.name = name;
    t.dtype = std::string(dtype->as_string());
    const size_t elem = safetensors_dtype_size(t.dtype);
    if (elem == 0) fail(8, what + "unknown dtype '" + t.dtype + "'");
    if (shape->as_array().size() > kMaxDims)
      fail(8, what + std::to_string(shape->as_array().size()) + " dimensions (at most " + std::to_string(kMaxDims) + ")");
    uint64_t elements = 1;
    for (const auto& d : shape->as_array()) {
      if (!d.is_int64() && !d.is_uint64()) fail(8, what + "a dimension is not an integer");
      const auto dim = d.is_int64() ? d.as_int64() : static_cast<int64_t>(std::min<uint64_t>(d.as_uint64(), INT64_MAX));
      if (dim < 0 || dim == INT64_MAX) fail(8, what + "dimension " + std::to_string(dim) + " is out of range");
      if (__builtin_mul_overflow(elements, static_cast<uint64_t>(dim), &elements))
        fail(8, what + "element count overflows");
      t.shape.push_back(dim);
    }
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(elements, uint64_t{elem}, &nbytes)) fail(8, what + "byte size overflows");
    uint64_t range[2];
    for (int i = 0; i < 2; ++i) {
      const auto& v = offsets->as_array()[i];
      if (v.is_uint64()) {
        range[i] = v.as_uint64();
      } else if (v.is_int64() && v.as_int64() >= 0) {
        range[i] = static_cast<uint64_t>(v.as_int64());
      } else {
        fail(8, what + "data_offsets are not non-negative integers");
      }
    }
    if (range[0] > range[1] || range[1] > data_bytes)
      fail(data_offset_ + std::min(range[0], data_bytes),
           what + "data [" + std::to_string(range[0]) + ", " + std::to_string(range[1]) +
               ") is not inside the data section of " + std::to_string(data_bytes) + " bytes");
    if (range[1] - range[0] != nbytes)
      fail(data_offset_ + range[0], what + "data of " + std::to_string(range[1] - range[0]) + " bytes, but " +
                                        t.dtype + " " + std::to_string(elements) + " elements take " +
                                        std::to_string(nbytes));
    t.offset = data_offset_ + range[0];
    t.nbytes = static_cast<size_t>(nbytes);
    t.data = base_ + t.offset;
    ranges.push_back({range[0], range[1], tensors_.size()});
    index_.emplace(name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  // No two tensors may share bytes (empty tensors share nothing).
  std::sort(ranges.begin(), ranges.end(),
            [](const Range& a, const Range& b) { return std::pair(a.begin, a.end) < std::pair(b.begin, b.end); });
  for (size_t k = 1; k < ranges.size(); ++k) {
    const Range& prev = ranges[k - 1];
    const Range& cur = ranges[k];
    if (cur.begin < prev.end && cur.begin != cur.end)
      fail(data_offset_ + cur.begin, "tensor '" + tensors_[cur.tensor].name + "': data overlaps tensor '" +
                                         tensors_[prev.tensor].name + "'");
  }
}

}  // namespace inferd::engine
