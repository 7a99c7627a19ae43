// DeepSeek-V3/V4 tokenization: the "deepseek-v3" pre-tokenizer splits as the
// `tokenizers` library does with DeepSeek's three Split regexes, tokenizer.json
// files spelling them are recognised, and the tiny chat fixture's tokenizer
// (tests/golden/dsv4-tiny-chat, read through the Hugging Face checkpoint
// reader) gives the library's ids on tests/golden/dsv4_tokenizer.json, both
// made by tools/make_dsv4_checkpoint.py --preset tiny-chat and
// tools/make_dsv4_tokenizer_golden.py.
#include <doctest/doctest.h>

#include <boost/json.hpp>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/hf_checkpoint.hpp"
#include "engine/pretokenizer.hpp"
#include "engine/tokenizer.hpp"
#include "tests/unit/golden_runner.hpp"
#include "tests/unit/safetensors_scratch.hpp"
#include "tests/unit/test_paths.hpp"

using namespace inferd;
using engine::PreTokenizer;
namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

std::vector<std::string> split(std::string_view text) {
  std::vector<std::string> out;
  for (auto p : PreTokenizer("deepseek-v3").split(text)) out.emplace_back(p);
  return out;
}

std::string golden_dir() { return test_paths::source_dir() + "/tests/golden"; }

}  // namespace

TEST_CASE("dsv4 pre-tokenizer: numbers in threes, CJK and kana runs, punctuation taking ASCII letters") {
  using V = std::vector<std::string>;
  // Pieces as the tokenizers library's pre_tokenize_str gives them (before the byte mapping).
  CHECK(split("Hello, world! 12345\n\n今天abc") == V{"Hello", ",", " world", "!", " ", "123", "45", "\n\n", "今天", "abc"});
  CHECK(split("a.b.c (x) \"q\" don't") == V{"a", ".b", ".c", " (", "x", ")", " \"", "q", "\"", " don", "'t"});
  CHECK(split("カタカナとひらがな 1234567") == V{"カタカナとひらがな", " ", "123", "456", "7"});
  CHECK(split("café  x\t\ty ") == V{"café", " ", " x", "\t", "\ty", " "});
  CHECK(split("😀!!\n") == V{"😀!!\n"});
  CHECK(split("e\u0301t\u00e9") == V{"e\u0301t\u00e9"});  // marks stay with their letters
}

TEST_CASE("dsv4 pre-tokenizer: DeepSeek's tokenizer.json regexes name the deepseek-v3 family") {
  const std::string third_escaped =
      R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  // DeepSeek's files write CR and LF inside the classes as the characters themselves.
  std::string third_raw = third_escaped;
  for (size_t at; (at = third_raw.find("\\r\\n")) != std::string::npos;) third_raw.replace(at, 4, "\r\n");
  const std::vector<std::string> escaped{R"(\p{N}{1,3})", "[一-龥぀-ゟ゠-ヿ]+", third_escaped};
  const std::vector<std::string> raw{R"(\p{N}{1,3})", "[一-龥぀-ゟ゠-ヿ]+", third_raw};
  CHECK(PreTokenizer::family_of(escaped) == "deepseek-v3");
  CHECK(PreTokenizer::family_of(raw) == "deepseek-v3");
  // Order matters: the same regexes in another order are another pre-tokenizer.
  const std::vector<std::string> swapped{escaped[1], escaped[0], escaped[2]};
  CHECK_FALSE(PreTokenizer::family_of(swapped).has_value());
}

TEST_CASE("dsv4 tokenizer: the tiny chat checkpoint's tokenizer gives the tokenizers library's ids") {
  // The fixture's config is DeepSeek-V4's, which this test does not need: its
  // tokenizer files go into a copy of the Llama fixture, so the checkpoint
  // reader takes them as any Hugging Face tokenizer.
  test_scratch::Scratch s(golden_dir() + "/hf-tiny", "dsv4-tok");
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "generation_config.json"})
    fs::copy_file(golden_dir() + "/dsv4-tiny-chat/" + f, s.path(f), fs::copy_options::overwrite_existing);
  fs::remove(s.path("chat_template.jinja"));
  const auto file = engine::open_model(s.path());
  const auto tok = engine::Tokenizer::from_gguf(*file);
  CHECK(tok->pre_tokenizer().name() == "deepseek-v3");
  CHECK(tok->vocab_size() == 512);
  CHECK(tok->token_text(tok->bos()) == "<｜begin▁of▁sentence｜>");
  CHECK(tok->token_text(tok->eos()) == "<｜end▁of▁sentence｜>");
  CHECK(tok->bos() == 0);
  CHECK(tok->eos() == 1);
  CHECK(tok->add_bos());
  CHECK(tok->stop_ids() == std::vector<int32_t>{1});
  CHECK(tok->token_type(*tok->find("<｜User｜>")) == engine::TokenType::Control);
  CHECK(tok->token_type(*tok->find("<｜Assistant｜>")) == engine::TokenType::Control);
  // The model writes these in its answer: added, not special, so never hidden.
  CHECK(tok->token_type(*tok->find("<think>")) == engine::TokenType::UserDefined);
  CHECK(tok->token_type(*tok->find("</think>")) == engine::TokenType::UserDefined);

  const json::object g = test_golden::read_golden(golden_dir() + "/dsv4_tokenizer.json");
  const auto& cases = g.at("cases").as_array();
  CHECK(cases.size() >= 30);
  for (const auto& cv : cases) {
    const auto& c = cv.as_object();
    const std::string text(c.at("text").as_string());
    const bool add_special = c.at("add_special").as_bool();
    CAPTURE(text);
    CAPTURE(add_special);
    const std::vector<int32_t> ids = tok->encode(text, add_special, true);
    CHECK(ids == test_golden::ints(c.at("ids")));
    // Round trip, less the BOS the encoder adds.
    if (!add_special) CHECK(tok->decode(ids, false) == text);
  }
}
