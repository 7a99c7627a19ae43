// A Hugging Face Llama directory whose tokenizer.json is SentencePiece-style
// BPE with byte fallback (Llama 2's, Mistral's, TinyLlama's layout):
// tests/golden/hf-spm-tiny and its golden hf_spm_tiny.json, both made by
// tools/make_hf_spm_fixture.py. The tokenizer gives the `tokenizers` library's
// ids on tricky text (spaces, control tokens, bytes no piece covers); the model
// matches transformers in float32. Other spellings are refused naming the file
// and key.
#include <doctest/doctest.h>

#include <boost/json.hpp>

#include "engine/hf_checkpoint.hpp"
#include "engine/tokenizer.hpp"
#include "tests/unit/golden_runner.hpp"
#include "tests/unit/safetensors_scratch.hpp"
#include "tests/unit/test_paths.hpp"

using namespace inferd;
using namespace test_golden;
using test_scratch::write_text;

namespace {

const std::string kFixture = test_paths::source_dir() + "/tests/golden/hf-spm-tiny";
boost::json::object golden() { return read_golden(test_paths::source_dir() + "/tests/golden/hf_spm_tiny.json"); }

// A scratch copy of the fixture whose tokenizer.json has `from` replaced by `to`.
struct EditedTokenizer : test_scratch::Scratch {
  EditedTokenizer(const std::string& tag, const std::string& from, const std::string& to)
      : Scratch(kFixture, "hfspm-" + tag) {
    std::string t = read_text(path("tokenizer.json"));
    const auto at = t.find(from);
    REQUIRE_MESSAGE(at != std::string::npos, from);
    write_text(path("tokenizer.json"), t.replace(at, from.size(), to));
  }
};

}  // namespace

TEST_CASE("HF SentencePiece-style tokenizer.json: the tokenizers library's ids, BOS in front, text back") {
  const auto file = engine::open_model(kFixture);
  const auto tok = engine::Tokenizer::from_gguf(*file);
  CHECK(tok->model() == engine::TokenizerModel::SentencePiece);
  CHECK(tok->token_text(tok->bos()) == "<s>");
  CHECK(tok->token_text(tok->eos()) == "</s>");
  CHECK(tok->add_bos());
  CHECK(tok->token_type(*tok->find("<0x0A>")) == engine::TokenType::Byte);
  CHECK(tok->token_type(*tok->find("<unk>")) == engine::TokenType::Unknown);
  CHECK(tok->token_type(*tok->find("<|im_start|>")) == engine::TokenType::Control);
  const auto g = golden();
  for (const auto& tv : g.at("tokenize").as_array()) {
    const std::string text(tv.at("text").as_string());
    CAPTURE(text);
    const auto ids = tok->encode(text, true, true);
    CHECK(ids == ints(tv.at("ids")));
    // Text back, but for control tokens and "▁" (a space, once escaped); behind
    // the BOS the prefix space would stay.
    if (text.find('<') == std::string::npos && text.find("\u2581") == std::string::npos && !ids.empty())
      CHECK(tok->decode(std::span(ids).subspan(1), true) == text);
  }
}

TEST_CASE("HF SentencePiece-style tokenizer.json: the Llama model on it matches transformers float32") {
  Runner r(kFixture);
  check_cases(r, golden(), true, 1e-4, "hf-spm exact");
}

TEST_CASE("HF SentencePiece-style tokenizer.json: other spellings are refused naming the file and key") {
  auto refused = [](const EditedTokenizer& s, const std::string& key) {
    const auto e = load_error(s.path());
    CHECK_MESSAGE(e.find(s.path("tokenizer.json")) != std::string::npos, e);
    CHECK_MESSAGE(e.find("'" + key + "'") != std::string::npos, e);
  };
  SUBCASE("a normalizer that lowercases") {
    refused(EditedTokenizer("lower", R"({"type":"Prepend","prepend":"▁"})", R"({"type":"Lowercase"})"), "normalizer");
  }
  SUBCASE("a Metaspace pre-tokenizer that prepends only to the first piece") {
    EditedTokenizer s("first", "\"pre_tokenizer\":null", R"("pre_tokenizer":{"type":"Metaspace","replacement":"▁","prepend_scheme":"first","split":false})");
    std::string t = read_text(s.path("tokenizer.json"));
    const auto at = t.find("\"normalizer\":{");
    REQUIRE(at != std::string::npos);
    const auto end = t.find("]}", at);
    write_text(s.path("tokenizer.json"), t.replace(at, end + 2 - at, "\"normalizer\":null"));
    refused(s, "pre_tokenizer.prepend_scheme");
  }
  SUBCASE("a merge whose result is not in the vocabulary") {
    refused(EditedTokenizer("merge", R"("merges":[["▁","t"])", R"("merges":[["▁","QQQQ"])"), "model.merges");
  }
}
