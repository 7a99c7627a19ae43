#include "engine/gguf_reader.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <numeric>

namespace inferd::engine {

static_assert(std::endian::native == std::endian::little, "GGUF values are read in place as little-endian");

namespace {

constexpr uint32_t kMaxDims = 4;
constexpr int kMaxArrayDepth = 8;  // nesting bound keeps validation's recursion shallow
// The fewest bytes one entry can take: lets absurd counts fail before any allocation.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;             // key length, type, u8 value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;  // name length, n_dims, one dim, type, offset

// Not "quoted": with a std::string argument, ADL would find std::quoted.
std::string single_quoted(std::string_view s) {
  std::string q(1, '\'');
  q.append(s).push_back('\'');
  return q;
}

// Encoded size of a fixed-size value type; 0 for STRING and ARRAY.
size_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::BOOL: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
    case GgufType::U64: case GgufType::I64: case GgufType::F64: return 8;
    default: return 0;
  }
}

bool is_integer(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::U16: case GgufType::I16:
    case GgufType::U32: case GgufType::I32: case GgufType::U64: case GgufType::I64:
    case GgufType::BOOL: return true;
    default: return false;
  }
}

bool is_float(GgufType t) { return t == GgufType::F32 || t == GgufType::F64; }

template <class T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Bounds-checked sequential reads over the image; every failure names the offset.
class Cursor {
 public:
  Cursor(const std::string& file, const uint8_t* base, size_t size, uint64_t pos = 0)
      : file_(file), base_(base), size_(size), pos_(pos) {}

  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }

  [[noreturn]] void fail(uint64_t at, const std::string& message) const { throw LoadError(file_, at, message); }

  template <class T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v = load<T>(base_ + pos_);
    pos_ += sizeof(T);
    return v;
  }

  void skip(uint64_t n, const char* what) {
    need(n, what);
    pos_ += n;
  }

  std::string_view string(const char* what) {
    const uint64_t at = pos_;
    const uint64_t n = read<uint64_t>(what);
    if (n > left())
      fail(at, std::string(what) + " length " + std::to_string(n) + " exceeds the " + std::to_string(left()) +
                   " bytes left in the file");
    std::string_view s(reinterpret_cast<const char*>(base_ + pos_), n);
    pos_ += n;
    return s;
  }

 private:
  void need(uint64_t n, const char* what) const {
    if (n > left())
      fail(pos_, std::string("unexpected end of file reading ") + what + " (need " + std::to_string(n) +
                     " bytes, " + std::to_string(left()) + " left)");
  }

  const std::string& file_;
  const uint8_t* base_;
  uint64_t size_;
  uint64_t pos_;
};

GgufType read_type(Cursor& c, const char* what) {
  const uint64_t at = c.pos();
  const uint32_t id = c.read<uint32_t>(what);
  if (id > static_cast<uint32_t>(GgufType::F64)) c.fail(at, "unknown " + std::string(what) + " " + std::to_string(id));
  return static_cast<GgufType>(id);
}

// Walks one value of type t, checking that all of it lies inside the file.
void skip_value(Cursor& c, GgufType t, int depth) {
  if (t == GgufType::STRING) {
    c.string("string value");
    return;
  }
  if (t == GgufType::BOOL) {
    const uint64_t at = c.pos();
    const uint8_t b = c.read<uint8_t>("bool value");
    if (b > 1) c.fail(at, "bool value " + std::to_string(b) + " is neither 0 nor 1");
    return;
  }
  if (t != GgufType::ARRAY) {
    c.skip(scalar_size(t), "value");
    return;
  }
  const uint64_t at = c.pos();
  const GgufType elem = read_type(c, "array element type");
  if (elem == GgufType::ARRAY && depth + 1 >= kMaxArrayDepth)
    c.fail(at, "arrays nested more than " + std::to_string(kMaxArrayDepth) + " deep");
  const uint64_t len_at = c.pos();
  const uint64_t n = c.read<uint64_t>("array length");
  const uint64_t min_elem = elem == GgufType::STRING ? 8 : elem == GgufType::ARRAY ? 12 : scalar_size(elem);
  if (n > c.left() / min_elem)
    c.fail(len_at, "array length " + std::to_string(n) + " cannot fit in the " + std::to_string(c.left()) +
                       " bytes left in the file");
  if (scalar_size(elem) != 0 && elem != GgufType::BOOL) {
    c.skip(n * scalar_size(elem), "array data");
    return;
  }
  for (uint64_t i = 0; i < n; ++i) skip_value(c, elem, depth + 1);
}

}  // namespace

LoadError::LoadError(std::string path, uint64_t at, const std::string& what)
    : std::runtime_error(path + ": offset " + std::to_string(at) + ": " + what),
      file(std::move(path)),
      offset(at),
      message(what) {}

std::string_view to_string(GgufType t) {
  static constexpr std::string_view names[] = {"u8",  "i8",   "u16",    "i16",   "u32", "i32", "f32",
                                               "bool", "string", "array", "u64", "i64", "f64"};
  const auto i = static_cast<uint32_t>(t);
  return i < std::size(names) ? names[i] : "unknown";
}

int64_t GgufTensorInfo::rows() const {
  if (dims.empty()) return 0;
  return std::accumulate(dims.begin() + 1, dims.end(), int64_t{1}, std::multiplies<>());
}

// ---- opening ---------------------------------------------------------------

std::unique_ptr<GgufFile> GgufFile::open(const std::string& path) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  try {
    f->take(map_file_readonly(path));
  } catch (const std::runtime_error& e) {
    f->fail(0, e.what());
  }
  f->parse();
  return f;
}

std::unique_ptr<GgufFile> GgufFile::open_memory(std::span<const uint8_t> bytes, std::string name) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = std::move(name);
  try {
    f->take(map_copy_readonly(bytes));
  } catch (const std::runtime_error& e) {
    f->fail(0, e.what());
  }
  f->parse();
  return f;
}

void GgufFile::take(const MappedBytes& m) {
  mapping_ = m.mapping;
  base_ = m.base;
  size_ = m.size;
}

std::unique_ptr<GgufFile> GgufFile::assemble(std::span<const uint8_t> metadata, std::string name,
                                             std::vector<GgufTensorInfo> tensors,
                                             std::vector<std::shared_ptr<const void>> keep) {
  auto f = open_memory(metadata, std::move(name));
  if (!f->tensors_.empty()) f->fail(0, "an assembled model's metadata image holds tensors of its own");
  for (auto& t : tensors) {
    if (f->tensor_index_.contains(t.name)) f->fail(t.info_offset, "duplicate tensor name " + single_quoted(t.name));
    f->tensor_index_.emplace(t.name, f->tensors_.size());
    f->tensors_.push_back(std::move(t));
  }
  f->keep_ = std::move(keep);
  return f;
}

GgufFile::~GgufFile() {
  if (mapping_) ::munmap(mapping_, size_);
}

void GgufFile::fail(uint64_t offset, const std::string& message) const { throw LoadError(path_, offset, message); }

// ---- validation --------------------------------------------------------------

void GgufFile::parse() {
  Cursor c(path_, base_, size_);

  // Header.
  const uint32_t magic = c.read<uint32_t>("magic");
  if (std::memcmp(&magic, "GGUF", 4) != 0) fail(0, "bad magic: not a GGUF file");
  const uint32_t version = c.read<uint32_t>("version");
  if (version != 2 && version != 3) {
    const uint32_t swapped = __builtin_bswap32(version);
    fail(4, swapped == 2 || swapped == 3 ? "big-endian GGUF is not supported"
                                         : "unsupported GGUF version " + std::to_string(version) + " (need 2 or 3)");
  }
  version_ = version;
  const uint64_t n_tensors = c.read<uint64_t>("tensor count");
  if (n_tensors > c.left() / kMinTensorInfoBytes)
    fail(8, "tensor count " + std::to_string(n_tensors) + " cannot fit in a file of " + std::to_string(size_) +
                " bytes");
  const uint64_t n_kv = c.read<uint64_t>("metadata count");
  if (n_kv > c.left() / kMinKvBytes)
    fail(16, "metadata count " + std::to_string(n_kv) + " cannot fit in a file of " + std::to_string(size_) +
                 " bytes");

  // Metadata: validated and indexed here, decoded on demand by the getters.
  for (uint64_t i = 0; i < n_kv; ++i) {
    const uint64_t key_at = c.pos();
    const std::string_view key = c.string("key");
    if (key.empty()) fail(key_at, "empty key");
    if (values_.contains(key)) fail(key_at, "duplicate key " + single_quoted(key));
    const GgufType type = read_type(c, "value type");
    const uint64_t value_at = c.pos();
    skip_value(c, type, 0);
    values_.emplace(std::string(key), Value{type, value_at});
    key_order_.emplace_back(key);
  }

  if (const Value* v = find_value("general.alignment")) {
    if (!is_integer(v->type) || v->type == GgufType::BOOL)
      fail(v->offset, "general.alignment must be an integer, found " + std::string(to_string(v->type)));
    const int64_t a = *get_int("general.alignment");
    if (a <= 0 || a > (int64_t{1} << 30) || !std::has_single_bit(static_cast<uint64_t>(a)))
      fail(v->offset, "general.alignment " + std::to_string(a) + " is not a power of two (up to 2^30)");
    alignment_ = static_cast<uint32_t>(a);
  }

  // Tensor table.
  table_offset_ = c.pos();
  std::vector<uint64_t> offset_field_at;  // where each tensor's offset is stored, for error reports
  std::vector<uint64_t> relative_offset;
  tensors_.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    const uint64_t info_at = c.pos();
    const std::string_view name = c.string("tensor name");
    if (name.empty()) fail(info_at, "empty tensor name");
    if (tensor_index_.contains(name)) fail(info_at, "duplicate tensor name " + single_quoted(name));
    const std::string what = "tensor " + single_quoted(name) + ": ";

    const uint64_t n_dims_at = c.pos();
    const uint32_t n_dims = c.read<uint32_t>("tensor dimension count");
    if (n_dims == 0 || n_dims > kMaxDims)
      fail(n_dims_at, what + std::to_string(n_dims) + " dimensions (need 1 to " + std::to_string(kMaxDims) + ")");
    std::vector<int64_t> dims;
    int64_t elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t dim_at = c.pos();
      const uint64_t dim = c.read<uint64_t>("tensor dimension");
      if (dim == 0 || dim > uint64_t(std::numeric_limits<int64_t>::max()))
        fail(dim_at, what + "dimension " + std::to_string(d) + " is " + std::to_string(static_cast<int64_t>(dim)) +
                         " (must be positive)");
      if (__builtin_mul_overflow(elements, static_cast<int64_t>(dim), &elements))
        fail(dim_at, what + "element count overflows");
      dims.push_back(static_cast<int64_t>(dim));
    }

    const uint64_t type_at = c.pos();
    const uint32_t type_id = c.read<uint32_t>("tensor type");
    const auto dtype = kernels::dtype_from_id(type_id);
    if (!dtype) fail(type_at, what + "unknown tensor type id " + std::to_string(type_id));
    const kernels::DTypeTraits& tr = kernels::traits(*dtype);
    if (dims[0] % tr.block_elems != 0)
      fail(n_dims_at + 4, what + "row length " + std::to_string(dims[0]) + " is not a multiple of the " +
                              std::string(tr.name) + " block size " + std::to_string(tr.block_elems));
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(static_cast<uint64_t>(elements / tr.block_elems), uint64_t{tr.block_bytes}, &nbytes))
      fail(n_dims_at, what + "byte size overflows");

    const uint64_t offset_at = c.pos();
    const uint64_t rel = c.read<uint64_t>("tensor data offset");
    if (rel % alignment_ != 0)
      fail(offset_at, what + "data offset " + std::to_string(rel) + " is not a multiple of the alignment " +
                          std::to_string(alignment_));

    tensor_index_.emplace(std::string(name), tensors_.size());
    tensors_.push_back(GgufTensorInfo{std::string(name), *dtype, std::move(dims), 0, static_cast<size_t>(nbytes),
                                      nullptr, info_at});
    offset_field_at.push_back(offset_at);
    relative_offset.push_back(rel);
  }

  // Data section: starts at the next multiple of the alignment.
  data_offset_ = (c.pos() + alignment_ - 1) / alignment_ * alignment_;
  const uint64_t data_bytes = data_offset_ <= size_ ? size_ - data_offset_ : 0;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    GgufTensorInfo& t = tensors_[i];
    const uint64_t rel = relative_offset[i];
    if (data_offset_ > size_ || rel > data_bytes || t.nbytes > data_bytes - rel)
      fail(offset_field_at[i], "tensor " + single_quoted(t.name) + ": data at [" + std::to_string(data_offset_) + " + " +
                                   std::to_string(rel) + ", +" + std::to_string(t.nbytes) +
                                   ") runs past the end of the file (" + std::to_string(size_) + " bytes)");
    t.offset = data_offset_ + rel;
    t.data = base_ + t.offset;
  }

  // No two tensors may share bytes.
  std::vector<size_t> by_offset(tensors_.size());
  std::iota(by_offset.begin(), by_offset.end(), size_t{0});
  std::sort(by_offset.begin(), by_offset.end(),
            [&](size_t a, size_t b) { return std::pair(tensors_[a].offset, a) < std::pair(tensors_[b].offset, b); });
  for (size_t k = 1; k < by_offset.size(); ++k) {
    const GgufTensorInfo& prev = tensors_[by_offset[k - 1]];
    const GgufTensorInfo& cur = tensors_[by_offset[k]];
    if (prev.offset + prev.nbytes > cur.offset)
      fail(offset_field_at[by_offset[k]], "tensor " + single_quoted(cur.name) + ": data overlaps tensor " + single_quoted(prev.name));
  }
}

// ---- metadata ----------------------------------------------------------------

const GgufFile::Value* GgufFile::find_value(std::string_view key) const {
  const auto it = values_.find(key);
  return it == values_.end() ? nullptr : &it->second;
}

bool GgufFile::has(std::string_view key) const { return find_value(key) != nullptr; }

GgufType GgufFile::type_of(std::string_view key) const {
  const Value* v = find_value(key);
  if (!v) fail(0, "no metadata key " + single_quoted(key));
  return v->type;
}

std::vector<std::string> GgufFile::keys() const { return key_order_; }

namespace {

// Decoders for one validated scalar at p; nullopt when the type does not convert.
std::optional<int64_t> int_at(GgufType t, const uint8_t* p) {
  switch (t) {
    case GgufType::U8: case GgufType::BOOL: return load<uint8_t>(p);
    case GgufType::I8: return load<int8_t>(p);
    case GgufType::U16: return load<uint16_t>(p);
    case GgufType::I16: return load<int16_t>(p);
    case GgufType::U32: return load<uint32_t>(p);
    case GgufType::I32: return load<int32_t>(p);
    case GgufType::I64: return load<int64_t>(p);
    case GgufType::U64: return static_cast<int64_t>(load<uint64_t>(p));  // see fits_int64
    default: return std::nullopt;
  }
}

bool fits_int64(GgufType t, const uint8_t* p) {
  return t != GgufType::U64 || load<uint64_t>(p) <= uint64_t(std::numeric_limits<int64_t>::max());
}

std::optional<double> float_at(GgufType t, const uint8_t* p) {
  if (t == GgufType::F32) return load<float>(p);
  if (t == GgufType::F64) return load<double>(p);
  if (t == GgufType::U64) return static_cast<double>(load<uint64_t>(p));
  if (const auto i = int_at(t, p)) return static_cast<double>(*i);
  return std::nullopt;
}

std::string string_at(const uint8_t* p) {
  const uint64_t n = load<uint64_t>(p);
  return std::string(reinterpret_cast<const char*>(p + 8), n);
}

}  // namespace

std::optional<int64_t> GgufFile::get_int(std::string_view key) const {
  const Value* v = find_value(key);
  if (!v) return std::nullopt;
  const auto i = int_at(v->type, base_ + v->offset);
  if (!i) fail(v->offset, "key " + single_quoted(key) + " holds " + std::string(to_string(v->type)) + ", not an integer");
  if (!fits_int64(v->type, base_ + v->offset)) fail(v->offset, "key " + single_quoted(key) + ": value does not fit in int64");
  return i;
}

std::optional<double> GgufFile::get_float(std::string_view key) const {
  const Value* v = find_value(key);
  if (!v) return std::nullopt;
  const auto f = float_at(v->type, base_ + v->offset);
  if (!f) fail(v->offset, "key " + single_quoted(key) + " holds " + std::string(to_string(v->type)) + ", not a number");
  return f;
}

std::optional<std::string> GgufFile::get_string(std::string_view key) const {
  const Value* v = find_value(key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::STRING)
    fail(v->offset, "key " + single_quoted(key) + " holds " + std::string(to_string(v->type)) + ", not a string");
  return string_at(base_ + v->offset);
}

std::optional<bool> GgufFile::get_bool(std::string_view key) const {
  const Value* v = find_value(key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::BOOL)
    fail(v->offset, "key " + single_quoted(key) + " holds " + std::string(to_string(v->type)) + ", not a bool");
  return base_[v->offset] != 0;
}

std::optional<GgufType> GgufFile::array_type(std::string_view key) const {
  const Value* v = find_value(key);
  if (!v || v->type != GgufType::ARRAY) return std::nullopt;
  return static_cast<GgufType>(load<uint32_t>(base_ + v->offset));
}

std::optional<GgufFile::ArrayRef> GgufFile::array_of(std::string_view key, bool (*accepts)(GgufType),
                                                     const char* kind) const {
  const Value* v = find_value(key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::ARRAY)
    fail(v->offset, "key " + single_quoted(key) + " holds " + std::string(to_string(v->type)) + ", not an array");
  const ArrayRef a{static_cast<GgufType>(load<uint32_t>(base_ + v->offset)), load<uint64_t>(base_ + v->offset + 4),
                   v->offset + 12};
  if (!accepts(a.elem))
    fail(v->offset, "key " + single_quoted(key) + " is an array of " + std::string(to_string(a.elem)) + ", not of " + kind);
  return a;
}

std::vector<std::string> GgufFile::get_string_array(std::string_view key) const {
  std::vector<std::string> out;
  const auto a = array_of(key, [](GgufType t) { return t == GgufType::STRING; }, "strings");
  if (!a) return out;
  out.reserve(a->size);
  const uint8_t* p = base_ + a->data;
  for (uint64_t i = 0; i < a->size; ++i) {
    out.push_back(string_at(p));
    p += 8 + out.back().size();
  }
  return out;
}

std::vector<int64_t> GgufFile::get_int_array(std::string_view key) const {
  std::vector<int64_t> out;
  const auto a = array_of(key, is_integer, "integers");
  if (!a) return out;
  out.reserve(a->size);
  const size_t step = scalar_size(a->elem);
  for (uint64_t i = 0; i < a->size; ++i) {
    const uint8_t* p = base_ + a->data + i * step;
    if (!fits_int64(a->elem, p))
      fail(a->data + i * step, "key " + single_quoted(key) + ": element " + std::to_string(i) + " does not fit in int64");
    out.push_back(*int_at(a->elem, p));
  }
  return out;
}

std::vector<float> GgufFile::get_float_array(std::string_view key) const {
  std::vector<float> out;
  const auto a = array_of(key, [](GgufType t) { return is_integer(t) || is_float(t); }, "numbers");
  if (!a) return out;
  out.reserve(a->size);
  const size_t step = scalar_size(a->elem);
  for (uint64_t i = 0; i < a->size; ++i)
    out.push_back(static_cast<float>(*float_at(a->elem, base_ + a->data + i * step)));
  return out;
}

// ---- tensors -------------------------------------------------------------------

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensorInfo& GgufFile::tensor(std::string_view name, std::initializer_list<int64_t> expected_dims) const {
  const GgufTensorInfo* t = find_tensor(name);
  if (!t) fail(table_offset_, "tensor " + single_quoted(name) + " not found");
  if (expected_dims.size() != 0 &&
      !std::equal(t->dims.begin(), t->dims.end(), expected_dims.begin(), expected_dims.end())) {
    auto show = [](auto first, auto last) {
      std::string s = "{";
      for (auto it = first; it != last; ++it) s += (it == first ? "" : ", ") + std::to_string(*it);
      return s + "}";
    };
    fail(t->info_offset, "tensor " + single_quoted(name) + " has dims " + show(t->dims.begin(), t->dims.end()) +
                             ", expected " + show(expected_dims.begin(), expected_dims.end()));
  }
  return *t;
}

void GgufFile::fault_in(const GgufTensorInfo& t) const {
  if (t.nbytes == 0) return;
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(t.data);
  const uintptr_t first = begin & ~(page - 1), end = begin + t.nbytes;
  ::madvise(reinterpret_cast<void*>(first), end - first, MADV_WILLNEED);
  // One byte of each page the tensor covers, from its own bytes only: an
  // assembled model's tensors (a checkpoint's widened norms) live on the heap,
  // where the rest of a page is not theirs. Volatile: the reads happen although
  // nothing uses their values.
  for (uintptr_t p = begin; p < end; p = (p & ~(page - 1)) + page) (void)*reinterpret_cast<const volatile uint8_t*>(p);
}

}  // namespace inferd::engine
