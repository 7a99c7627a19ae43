// GGUF reader: facts of the real default model, and small files built here, both
// valid and broken in every way the reader must reject.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/gguf_reader.hpp"
#include "tests/unit/gguf_writer.hpp"
#include "tests/unit/test_paths.hpp"

using inferd::engine::GgufFile;
using inferd::engine::GgufType;
using inferd::engine::LoadError;
using inferd::kernels::DType;

namespace {

// A small valid file with a value of every type and two tensors:
// "a" F32 {4, 2} holding 0..7 at data offset 0, "b" Q8_0 {32} at data offset 32.
GgufWriter valid_file(uint32_t version = 3) {
  GgufWriter w;
  w.header(2, 17, version);
  w.key("u8", GgufType::U8).u8(200);
  w.key("i8", GgufType::I8).put<int8_t>(-5);
  w.key("u16", GgufType::U16).put<uint16_t>(60000);
  w.key("i16", GgufType::I16).put<int16_t>(-300);
  w.kv_u32("u32", 4000000000u);
  w.key("i32", GgufType::I32).put<int32_t>(-70000);
  w.key("f32", GgufType::F32).put<float>(0.5f);
  w.key("yes", GgufType::BOOL).u8(1);
  w.kv_str("str", "hello");
  w.key("u64", GgufType::U64).u64(uint64_t(1) << 40);
  w.key("i64", GgufType::I64).put<int64_t>(-(int64_t(1) << 40));
  w.key("f64", GgufType::F64).put<double>(2.25);
  w.key("ints", GgufType::ARRAY).u32(uint32_t(GgufType::I32)).u64(3).put<int32_t>(1).put<int32_t>(-2).put<int32_t>(3);
  w.key("floats", GgufType::ARRAY).u32(uint32_t(GgufType::F32)).u64(2).put<float>(1.5f).put<float>(-1);
  w.key("words", GgufType::ARRAY).u32(uint32_t(GgufType::STRING)).u64(3).str("a").str("").str("ccc");
  w.key("nested", GgufType::ARRAY).u32(uint32_t(GgufType::ARRAY)).u64(2);
  w.u32(uint32_t(GgufType::U8)).u64(2).u8(1).u8(2);
  w.u32(uint32_t(GgufType::STRING)).u64(1).str("x");
  w.key("big", GgufType::U64).u64(~uint64_t(0));
  w.tensor("a", {4, 2}, DType::F32, 0);
  w.tensor("b", {32}, DType::Q8_0, 32);
  w.align(32);
  for (int i = 0; i < 8; ++i) w.put<float>(float(i));
  w.bytes(34, 7);
  return w;
}

std::unique_ptr<GgufFile> load(const GgufWriter& w) { return GgufFile::open_memory(w.b, "t.gguf"); }

// Opening must fail with this offset and a message containing `needle`.
void expect_error(const GgufWriter& w, uint64_t offset, const std::string& needle) {
  try {
    load(w);
    FAIL("opened a malformed file; expected: " << needle);
  } catch (const LoadError& e) {
    CHECK(e.file == "t.gguf");
    CHECK_MESSAGE(e.offset == offset, e.what());
    CHECK_MESSAGE(e.message.find(needle) != std::string::npos, e.what());
    CHECK(std::string(e.what()) == "t.gguf: offset " + std::to_string(offset) + ": " + e.message);
  }
}

}  // namespace

TEST_CASE("gguf: the default model's known facts") {
  const std::string path = test_paths::default_model();
  if (!std::filesystem::exists(path)) {
    MESSAGE("model not found, skipped: " << path);
    return;
  }
  const auto f = GgufFile::open(path);
  CHECK(f->version() == 3);
  CHECK(f->get_string("general.architecture") == "llama");
  CHECK(f->get_int("llama.block_count") == 30);
  CHECK(f->get_int("llama.embedding_length") == 576);
  CHECK(f->get_float("llama.rope.freq_base") == doctest::Approx(100000.0));
  CHECK(f->get_bool("tokenizer.ggml.add_bos_token") == false);
  CHECK(f->tensors().size() == 272);
  CHECK(f->data_offset() % f->alignment() == 0);

  const auto& emb = f->tensor("token_embd.weight", {576, 49152});
  CHECK(emb.type == DType::Q8_0);
  CHECK(emb.cols() == 576);
  CHECK(emb.rows() == 49152);
  CHECK(emb.nbytes == size_t(49152) * (576 / 32) * 34);
  // The data pointer shows the bytes stored at the tensor's file offset.
  std::vector<char> head(256);
  std::ifstream in(path, std::ios::binary);
  in.seekg(std::streamoff(emb.offset)).read(head.data(), std::streamsize(head.size()));
  CHECK(std::memcmp(emb.data, head.data(), head.size()) == 0);
  CHECK(f->tensor("blk.0.attn_norm.weight", {576}).type == DType::F32);
  CHECK(f->tensor("blk.0.ffn_down.weight").type == DType::Q4_1);
  CHECK_THROWS_AS(f->tensor("token_embd.weight", {49152, 576}), LoadError);
  CHECK(f->find_tensor("no.such.tensor") == nullptr);

  const auto tokens = f->get_string_array("tokenizer.ggml.tokens");
  CHECK(tokens.size() == 49152);
  CHECK(tokens[1] == "<|im_start|>");
  CHECK(f->get_int_array("tokenizer.ggml.token_type").size() == 49152);
  const auto tmpl = f->get_string("tokenizer.chat_template");
  REQUIRE(tmpl);
  CHECK(tmpl->find("<|im_start|>") != std::string::npos);
}

TEST_CASE("gguf: a small valid file reads back every value type") {
  for (uint32_t version : {2u, 3u}) {
    const auto f = load(valid_file(version));
    CHECK(f->version() == version);
    CHECK(f->keys().size() == 17);
    CHECK(f->keys().front() == "u8");
    CHECK(f->type_of("nested") == GgufType::ARRAY);
    CHECK(f->array_type("nested") == GgufType::ARRAY);
    CHECK(f->get_int("u8") == 200);
    CHECK(f->get_int("i8") == -5);
    CHECK(f->get_int("u16") == 60000);
    CHECK(f->get_int("i16") == -300);
    CHECK(f->get_int("u32") == 4000000000LL);
    CHECK(f->get_int("i32") == -70000);
    CHECK(f->get_int("u64") == (int64_t(1) << 40));
    CHECK(f->get_int("i64") == -(int64_t(1) << 40));
    CHECK(f->get_int("yes") == 1);
    CHECK(f->get_float("f32") == 0.5);
    CHECK(f->get_float("f64") == 2.25);
    CHECK(f->get_float("i32") == -70000.0);
    CHECK(f->get_bool("yes") == true);
    CHECK(f->get_string("str") == "hello");
    CHECK(f->get_int_array("ints") == std::vector<int64_t>{1, -2, 3});
    CHECK(f->get_float_array("floats") == std::vector<float>{1.5f, -1.0f});
    CHECK(f->get_float_array("ints") == std::vector<float>{1, -2, 3});
    CHECK(f->get_string_array("words") == std::vector<std::string>{"a", "", "ccc"});

    // Absent keys are empty; present keys of another type are errors.
    CHECK_FALSE(f->has("missing"));
    CHECK_FALSE(f->get_int("missing"));
    CHECK(f->get_string_array("missing").empty());
    CHECK_THROWS_AS(f->type_of("missing"), LoadError);
    CHECK_THROWS_WITH_AS(f->get_int("str"), doctest::Contains("'str' holds string, not an integer"), LoadError);
    CHECK_THROWS_AS(f->get_string("u32"), LoadError);
    CHECK_THROWS_AS(f->get_bool("u8"), LoadError);
    CHECK_THROWS_AS(f->get_float("words"), LoadError);
    CHECK_THROWS_WITH_AS(f->get_string_array("ints"), doctest::Contains("array of i32, not of strings"), LoadError);
    CHECK_THROWS_AS(f->get_int_array("floats"), LoadError);
    CHECK_THROWS_AS(f->get_int_array("nested"), LoadError);
    CHECK_THROWS_AS(f->get_string_array("str"), LoadError);
    CHECK_THROWS_WITH_AS(f->get_int("big"), doctest::Contains("does not fit in int64"), LoadError);
    CHECK(f->get_float("big") == doctest::Approx(18446744073709551615.0));

    REQUIRE(f->tensors().size() == 2);
    const auto& a = f->tensor("a", {4, 2});
    CHECK(a.type == DType::F32);
    CHECK(a.cols() == 4);
    CHECK(a.rows() == 2);
    CHECK(a.nbytes == 32);
    CHECK(a.offset == f->data_offset());
    CHECK(f->data_offset() % 32 == 0);
    CHECK(static_cast<const float*>(a.data)[5] == 5.0f);
    const auto& b = f->tensor("b");
    CHECK(b.type == DType::Q8_0);
    CHECK(b.nbytes == 34);
    CHECK(b.offset == f->data_offset() + 32);
    CHECK(static_cast<const uint8_t*>(b.data)[33] == 7);
    CHECK(f->file_size() == b.offset + 34);
    CHECK_THROWS_WITH_AS(f->tensor("a", {2, 4}), doctest::Contains("'a' has dims {4, 2}, expected {2, 4}"), LoadError);
    CHECK_THROWS_WITH_AS(f->tensor("c"), doctest::Contains("tensor 'c' not found"), LoadError);
  }
}

TEST_CASE("gguf: open() maps a real file, and names the file in errors") {
  const auto dir = std::filesystem::temp_directory_path();
  const std::string path = (dir / ("inferd-test-gguf-" + std::to_string(::getpid()) + ".gguf")).string();
  const auto w = valid_file();
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(w.b.data()), std::streamsize(w.b.size()));
  {
    const auto f = GgufFile::open(path);
    CHECK(f->path() == path);
    CHECK(f->file_size() == w.b.size());
    CHECK(f->get_string("str") == "hello");
    CHECK(reinterpret_cast<uintptr_t>(f->tensor("a").data) % 32 == 0);
  }
  std::filesystem::resize_file(path, 3);
  const std::string truncated = path + ": offset 0: unexpected end of file reading magic (need 4 bytes, 3 left)";
  CHECK_THROWS_WITH_AS(GgufFile::open(path), truncated.c_str(), LoadError);
  std::filesystem::remove(path);
  CHECK_THROWS_WITH_AS(GgufFile::open(path), doctest::Contains("cannot open"), LoadError);
  CHECK_THROWS_WITH_AS(GgufFile::open(dir.string()), doctest::Contains("not a regular file"), LoadError);
}

TEST_CASE("gguf: general.alignment places the data section") {
  GgufWriter w;
  w.header(1, 1).kv_u32("general.alignment", 64);
  w.tensor("t", {16}, DType::F32, 0).align(64).bytes(64);
  const auto f = load(w);
  CHECK(f->alignment() == 64);
  CHECK(f->data_offset() % 64 == 0);
  CHECK(f->data_offset() > 32);

  GgufWriter bad;
  bad.header(0, 1).key("general.alignment", GgufType::U32);
  const uint64_t at = bad.pos();
  bad.u32(48);
  expect_error(bad, at, "general.alignment 48 is not a power of two");
  GgufWriter zero;
  zero.header(0, 1).kv_u32("general.alignment", 0);
  expect_error(zero, zero.pos() - 4, "general.alignment 0");
  GgufWriter text;
  text.header(0, 1).kv_str("general.alignment", "32");
  expect_error(text, text.pos() - 10, "general.alignment must be an integer, found string");
}

TEST_CASE("gguf: every truncation of a valid file is rejected") {
  const auto w = valid_file();
  for (size_t n = 0; n < w.b.size(); ++n) {
    const std::vector<uint8_t> cut(w.b.begin(), w.b.begin() + long(n));
    try {
      GgufFile::open_memory(cut, "t.gguf");
      FAIL("prefix of " << n << " bytes opened");
    } catch (const LoadError& e) {
      CHECK(e.offset <= n);
    }
  }
}

TEST_CASE("gguf: malformed headers") {
  expect_error(GgufWriter{}, 0, "unexpected end of file reading magic");
  GgufWriter magic;
  magic.b = {'G', 'G', 'U', 'X'};
  magic.u32(3).u64(0).u64(0);
  expect_error(magic, 0, "bad magic");
  GgufWriter v1;
  v1.header(0, 0, 1);
  expect_error(v1, 4, "unsupported GGUF version 1 (need 2 or 3)");
  GgufWriter big_endian;
  big_endian.header(0, 0, 0x03000000u);
  expect_error(big_endian, 4, "big-endian");
  GgufWriter short_header;
  short_header.header(0, 0);
  short_header.b.resize(12);
  expect_error(short_header, 8, "unexpected end of file reading tensor count");
  GgufWriter many_tensors;
  many_tensors.header(uint64_t(1) << 40, 0);
  expect_error(many_tensors, 8, "tensor count 1099511627776 cannot fit");
  GgufWriter many_kv;
  many_kv.header(0, 1000);
  expect_error(many_kv, 16, "metadata count 1000 cannot fit");
}

TEST_CASE("gguf: malformed metadata") {
  GgufWriter key_len;
  key_len.header(0, 1).u64(1000).bytes(20);
  expect_error(key_len, 24, "key length 1000 exceeds the 20 bytes left");

  GgufWriter empty_key;
  empty_key.header(0, 1).kv_u32("", 1);
  expect_error(empty_key, 24, "empty key");

  GgufWriter cut_value;
  cut_value.header(0, 1).key("k", GgufType::U64).u32(7);
  expect_error(cut_value, 24 + 9 + 4, "unexpected end of file reading value");

  GgufWriter cut_string;
  cut_string.header(0, 1).key("k", GgufType::STRING).u64(10).bytes(4);
  expect_error(cut_string, 24 + 9 + 4, "string value length 10 exceeds the 4 bytes left");

  GgufWriter bad_type;
  bad_type.header(0, 1).str("k").u32(13).u32(0);
  expect_error(bad_type, 24 + 9, "unknown value type 13");

  GgufWriter bad_bool;
  bad_bool.header(0, 1).key("k", GgufType::BOOL).u8(2);
  expect_error(bad_bool, 24 + 13, "bool value 2 is neither 0 nor 1");

  GgufWriter dup;
  dup.header(0, 2).kv_u32("k", 1);
  const uint64_t second = dup.pos();
  dup.kv_u32("k", 2);
  expect_error(dup, second, "duplicate key 'k'");

  const uint64_t array_at = 24 + 13;  // after the header, key "k" and the ARRAY type
  GgufWriter bad_elem;
  bad_elem.header(0, 1).key("k", GgufType::ARRAY).u32(99).u64(0);
  expect_error(bad_elem, array_at, "unknown array element type 99");

  GgufWriter long_array;
  long_array.header(0, 1).key("k", GgufType::ARRAY).u32(uint32_t(GgufType::U32)).u64(uint64_t(1) << 62).bytes(16);
  expect_error(long_array, array_at + 4, "array length 4611686018427387904 cannot fit");

  GgufWriter long_string_array;
  long_string_array.header(0, 1).key("k", GgufType::ARRAY).u32(uint32_t(GgufType::STRING)).u64(3).str("a");
  expect_error(long_string_array, array_at + 4, "array length 3 cannot fit");

  GgufWriter cut_array;
  cut_array.header(0, 1).key("k", GgufType::ARRAY).u32(uint32_t(GgufType::STRING)).u64(2).str("a").u64(50).bytes(30);
  expect_error(cut_array, array_at + 12 + 9, "string value length 50 exceeds the 30 bytes left");

  GgufWriter deep;
  deep.header(0, 1).key("k", GgufType::ARRAY);
  for (int i = 0; i < 20; ++i) deep.u32(uint32_t(GgufType::ARRAY)).u64(1);
  deep.u32(uint32_t(GgufType::U8)).u64(1).u8(0);
  expect_error(deep, array_at + 7 * 12, "arrays nested more than 8 deep");
}

TEST_CASE("gguf: malformed tensor tables and data") {
  // One tensor "t" with the given dims/type/offset and `data` bytes of data.
  struct Made {
    GgufWriter w;
    uint64_t info, n_dims, first_dim, type, offset;
  };
  auto make = [](std::vector<uint64_t> dims, uint32_t type, uint64_t rel, size_t data) {
    Made m;
    m.w.header(1, 0);
    m.info = m.w.pos();
    m.n_dims = m.info + 9;
    m.first_dim = m.n_dims + 4;
    m.type = m.first_dim + 8 * dims.size();
    m.offset = m.type + 4;
    m.w.tensor("t", dims, DType(type), rel).align(32).bytes(data);
    return m;
  };
  auto ok = make({8, 2}, uint32_t(DType::F32), 0, 64);
  CHECK(load(ok.w)->tensor("t", {8, 2}).nbytes == 64);

  auto five = make({1, 1, 1, 1, 1}, 0, 0, 4);
  expect_error(five.w, five.n_dims, "tensor 't': 5 dimensions (need 1 to 4)");
  auto none = make({}, 0, 0, 4);
  expect_error(none.w, none.n_dims, "0 dimensions");
  auto zero = make({4, 0}, 0, 0, 64);
  expect_error(zero.w, zero.first_dim + 8, "dimension 1 is 0 (must be positive)");
  auto negative = make({~uint64_t(0)}, 0, 0, 64);
  expect_error(negative.w, negative.first_dim, "dimension 0 is -1 (must be positive)");
  auto overflow = make({uint64_t(1) << 32, uint64_t(1) << 32}, 0, 0, 64);
  expect_error(overflow.w, overflow.first_dim + 8, "element count overflows");
  auto unknown = make({32}, 99, 0, 128);
  expect_error(unknown.w, unknown.type, "unknown tensor type id 99");
  auto ragged = make({33}, uint32_t(DType::Q8_0), 0, 128);
  expect_error(ragged.w, ragged.first_dim, "row length 33 is not a multiple of the");
  auto misaligned = make({4}, 0, 16, 64);
  expect_error(misaligned.w, misaligned.offset, "data offset 16 is not a multiple of the alignment 32");
  auto beyond = make({4}, 0, 1024, 64);
  expect_error(beyond.w, beyond.offset, "runs past the end of the file");
  auto huge_offset = make({4}, 0, ~uint64_t(31), 64);
  expect_error(huge_offset.w, huge_offset.offset, "runs past the end of the file");
  auto short_data = make({8, 2}, 0, 0, 63);
  expect_error(short_data.w, short_data.offset, "runs past the end of the file");
  auto cut_info = make({8, 2}, 0, 0, 0);
  cut_info.w.b.resize(cut_info.first_dim + 8 + 3);
  expect_error(cut_info.w, cut_info.first_dim + 8, "unexpected end of file reading tensor dimension");

  GgufWriter long_name;
  long_name.header(1, 0).u64(500).bytes(40);
  expect_error(long_name, 24, "tensor name length 500 exceeds");

  GgufWriter dup;
  dup.header(2, 0).tensor("t", {8}, DType::F32, 0);
  const uint64_t second = dup.pos();
  dup.tensor("t", {8}, DType::F32, 32).align(32).bytes(64);
  expect_error(dup, second, "duplicate tensor name 't'");

  GgufWriter overlap;
  overlap.header(2, 0).tensor("a", {16}, DType::F32, 0);
  overlap.tensor("b", {8}, DType::F32, 32);
  const uint64_t b_offset = overlap.pos() - 8;
  overlap.align(32).bytes(64);
  expect_error(overlap, b_offset, "tensor 'b': data overlaps tensor 'a'");

  GgufWriter same;
  same.header(2, 0).tensor("a", {8}, DType::F32, 0);
  same.tensor("b", {8}, DType::F32, 0);
  const uint64_t same_offset = same.pos() - 8;
  same.align(32).bytes(32);
  expect_error(same, same_offset, "tensor 'b': data overlaps tensor 'a'");
}
