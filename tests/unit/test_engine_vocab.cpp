// The model's vocabulary (rows of its embedding and output) against the
// tokenizer's: copies of the default model whose tokenizer lists fewer tokens
// than the model outputs (padding, as many published models carry) must never
// sample a padding id; one whose tokenizer lists more is refused at load. And a
// model with a SentencePiece vocabulary loads and generates.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "engine/engine.hpp"
#include "engine/gguf_reader.hpp"
#include "engine/tokenizer.hpp"
#include "tests/engine_generate.hpp"
#include "test_paths.hpp"

using namespace inferd;

namespace {

// Walks a GGUF image's header, metadata and tensor table.
struct GgufCursor {
  const std::vector<uint8_t>& b;
  size_t o = 0;

  template <class T>
  T get() {
    T v;
    REQUIRE(o + sizeof v <= b.size());
    std::memcpy(&v, b.data() + o, sizeof v);
    o += sizeof v;
    return v;
  }
  std::string str() {
    const auto n = get<uint64_t>();
    REQUIRE(o + n <= b.size());
    std::string s(reinterpret_cast<const char*>(b.data() + o), n);
    o += n;
    return s;
  }
  void skip_value(engine::GgufType t) {
    using engine::GgufType;
    switch (t) {
      case GgufType::U8: case GgufType::I8: case GgufType::BOOL: o += 1; break;
      case GgufType::U16: case GgufType::I16: o += 2; break;
      case GgufType::U32: case GgufType::I32: case GgufType::F32: o += 4; break;
      case GgufType::U64: case GgufType::I64: case GgufType::F64: o += 8; break;
      case GgufType::STRING: str(); break;
      case GgufType::ARRAY: {
        const auto elem = static_cast<GgufType>(get<uint32_t>());
        for (uint64_t n = get<uint64_t>(); n > 0; --n) skip_value(elem);
        break;
      }
    }
  }
};

template <class T>
void put(std::vector<uint8_t>& out, T v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), p, p + sizeof v);
}

void put_str(std::vector<uint8_t>& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

// Writes a copy of the GGUF at `src` whose tokenizer lists `n_tokens` tokens: the
// first ones of the original, then made-up "<extra_i>" ones. Weights and every
// other key are copied unchanged.
void copy_with_tokens(const std::string& src, const std::string& dst, size_t n_tokens) {
  using engine::GgufType;
  const auto file = engine::GgufFile::open(src);
  const auto tokens = file->get_string_array("tokenizer.ggml.tokens");
  const auto types = file->get_int_array("tokenizer.ggml.token_type");
  REQUIRE(types.size() == tokens.size());
  std::ifstream in(src, std::ios::binary);
  const std::vector<uint8_t> b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());

  GgufCursor c{b};
  c.o = 8;  // magic, version
  const auto n_tensors = c.get<uint64_t>();
  const auto n_kv = c.get<uint64_t>();
  std::vector<uint8_t> out(b.begin(), b.begin() + c.o);
  for (uint64_t i = 0; i < n_kv; ++i) {
    const size_t start = c.o;
    const std::string key = c.str();
    c.skip_value(static_cast<GgufType>(c.get<uint32_t>()));
    if (key == "tokenizer.ggml.tokens" || key == "tokenizer.ggml.token_type") {
      put_str(out, key);
      put<uint32_t>(out, static_cast<uint32_t>(GgufType::ARRAY));
      const bool text = key == "tokenizer.ggml.tokens";
      put<uint32_t>(out, static_cast<uint32_t>(text ? GgufType::STRING : GgufType::I32));
      put<uint64_t>(out, n_tokens);
      for (size_t t = 0; t < n_tokens; ++t) {
        if (text) put_str(out, t < tokens.size() ? tokens[t] : "<extra_" + std::to_string(t) + ">");
        else put<int32_t>(out, t < types.size() ? static_cast<int32_t>(types[t]) : 1);
      }
    } else {
      out.insert(out.end(), b.begin() + start, b.begin() + c.o);
    }
  }
  const size_t table = c.o;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    c.str();
    const auto n_dims = c.get<uint32_t>();
    c.o += 8 * n_dims + 4 + 8;  // dims, type, offset (relative to the data section: unchanged)
  }
  out.insert(out.end(), b.begin() + table, b.begin() + c.o);
  while (out.size() % file->alignment()) out.push_back(0);
  out.insert(out.end(), b.begin() + file->data_offset(), b.end());
  std::ofstream(dst, std::ios::binary).write(reinterpret_cast<const char*>(out.data()), std::streamsize(out.size()));
}

engine::EngineOptions small_options(const std::string& model) {
  engine::EngineOptions o;
  o.model_path = model;
  o.threads = 1;
  o.max_model_len = 128;
  o.kv_cache_bytes = 8 << 20;
  return o;
}

struct TempFile {
  std::string path;
  explicit TempFile(const std::string& name)
      : path((std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()) + ".gguf")).string()) {}
  ~TempFile() { std::filesystem::remove(path); }
};

}  // namespace

TEST_CASE("engine: ids the model outputs past the tokenizer's vocabulary are never sampled") {
  const std::vector<int32_t> prompt = {1, 504, 314, 260};
  constexpr int kTokens = 16;
  std::vector<int32_t> full_ids;
  {
    engine::Engine full(small_options(test_paths::default_model()));
    full_ids = test_engine::generate_greedy(full, {prompt}, kTokens)[0].ids;
  }
  // The copy's tokenizer ends just before the largest id the full model chose:
  // there the model still ranks that id first, but it is padding.
  const int32_t cut = *std::max_element(full_ids.begin(), full_ids.end());
  REQUIRE(cut > *std::max_element(prompt.begin(), prompt.end()));
  const TempFile padded("inferd-padded-vocab");
  copy_with_tokens(test_paths::default_model(), padded.path, static_cast<size_t>(cut));

  engine::Engine eng(small_options(padded.path));
  CHECK(eng.tokenizer().vocab_size() == static_cast<size_t>(cut));
  CHECK(eng.model_config().vocab > cut);
  const auto got = test_engine::generate_greedy(eng, {prompt}, kTokens)[0];
  REQUIRE(got.ids.size() == kTokens);
  for (int32_t id : got.ids) CHECK(id < cut);
  // Up to the padded id, the same tokens as the full model.
  const auto first_cut = std::find(full_ids.begin(), full_ids.end(), cut) - full_ids.begin();
  CHECK(std::equal(full_ids.begin(), full_ids.begin() + first_cut, got.ids.begin()));
}

TEST_CASE("engine: a tokenizer with more tokens than the model outputs is refused at load, naming the file") {
  const auto model_vocab = engine::GgufFile::open(test_paths::default_model())->tensor("token_embd.weight").rows();
  const TempFile wide("inferd-wide-tokenizer");
  copy_with_tokens(test_paths::default_model(), wide.path, static_cast<size_t>(model_vocab) + 8);
  try {
    engine::Engine eng(small_options(wide.path));
    FAIL("loaded a model whose tokenizer has ids it cannot output");
  } catch (const std::exception& e) {
    const std::string what = e.what();
    CHECK_MESSAGE(what.find(wide.path) != std::string::npos, what);
    CHECK_MESSAGE(what.find(std::to_string(model_vocab + 8) + " tokens") != std::string::npos, what);
    CHECK_MESSAGE(what.find(std::to_string(model_vocab)) != std::string::npos, what);
  }
}

TEST_CASE("engine: a model with a SentencePiece vocabulary loads and generates") {
  // tests/golden/spm-tiny.gguf: random weights, a 2000-piece vocabulary (tools/make_spm_fixture.py).
  engine::Engine eng(small_options(test_paths::source_dir() + "/tests/golden/spm-tiny.gguf"));
  const auto& tok = eng.tokenizer();
  CHECK(tok.model() == engine::TokenizerModel::SentencePiece);
  CHECK(eng.model_config().vocab == static_cast<int>(tok.vocab_size()));
  const auto prompt = tok.encode("Hello world", /*add_special=*/true, /*parse_special=*/true);
  REQUIRE(prompt.size() > 1);
  CHECK(prompt.front() == tok.bos());
  const auto got = test_engine::generate_greedy(eng, {prompt}, 8)[0];
  REQUIRE(got.ids.size() == 8);
  for (int32_t id : got.ids) CHECK(static_cast<size_t>(id) < tok.vocab_size());
}
