// libFuzzer target for the tokenizer of a real model (INFERD_MODEL, default the
// default model; tests/golden/spm-tiny.gguf for SentencePiece), loaded once. Any
// bytes must encode to ids inside the vocabulary, with and without special
// tokens parsed. Byte-level BPE: well-formed UTF-8 must decode back to the text,
// less the bytes the vocabulary has no token for (SmolLM2 lacks a few control
// characters, e.g. 0x04), which the tokenizer drops as llama.cpp does.
// SentencePiece with a byte token for every byte: well-formed UTF-8 must decode
// back to itself, unless a special token was matched (a space follows it) or
// the text holds a "▁" of its own (it decodes as a space). Malformed bytes are
// not checked: a lead byte takes the next bytes into its character whatever
// they are, so a space's "▁" there comes back as those three bytes (as in
// llama.cpp).
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "engine/gguf_reader.hpp"
#include "engine/tokenizer.hpp"
#include "engine/utf8.hpp"

using inferd::engine::GgufFile;
using inferd::engine::Tokenizer;
using inferd::engine::TokenizerModel;
using inferd::engine::TokenType;

namespace {

std::unique_ptr<Tokenizer> tokenizer;
std::array<bool, 256> spellable{};  // the vocabulary has a token for this byte alone
bool sentencepiece = false;

// GPT-2's byte-level alphabet: printable bytes stand for themselves, the others
// for U+0100 onwards in byte order.
std::string byte_token_text(unsigned b) {
  const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
  unsigned cp = b;
  if (!printable) {
    cp = 256;
    for (unsigned x = 0; x < b; ++x)
      if (!((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE))) ++cp;
  }
  std::string out;
  inferd::engine::utf8::append_codepoint(out, cp);
  return out;
}

[[noreturn]] void fail(const char* what, std::string_view text) {
  std::fprintf(stderr, "fuzz_tokenizer: %s (input of %zu bytes)\n", what, text.size());
  std::abort();
}

void round_trip(std::string_view text, bool parse_special) {
  const auto ids = tokenizer->encode(text, /*add_special=*/false, parse_special);
  for (int32_t id : ids)
    if (id < 0 || static_cast<size_t>(id) >= tokenizer->vocab_size()) fail("id outside the vocabulary", text);
  const std::string back = tokenizer->decode(ids, /*skip_special=*/false);
  if (!inferd::engine::utf8::is_valid(text)) return;
  if (sentencepiece) {
    for (int32_t id : ids)
      if (TokenType t = tokenizer->token_type(id); t == TokenType::Control || t == TokenType::UserDefined ||
                                                   t == TokenType::Unknown)
        return;
    if (text.find("\xE2\x96\x81") != std::string_view::npos) return;
    if (back != text) fail("decode(encode(text)) != text", text);
    return;
  }
  std::string spelled;
  for (char c : text)
    if (spellable[static_cast<unsigned char>(c)]) spelled += c;
  if (back != spelled) fail("decode(encode(text)) != text less the bytes without a token", text);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* env = std::getenv("INFERD_MODEL");
  std::string path = env != nullptr && *env != '\0'
                         ? env
                         : std::string(std::getenv("HOME") ? std::getenv("HOME") : "") +
                               "/.cache/inferd/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  try {
    const auto file = GgufFile::open(path);
    tokenizer = Tokenizer::from_gguf(*file);
    sentencepiece = tokenizer->model() == TokenizerModel::SentencePiece;
    for (unsigned b = 0; b < 256; ++b) {
      const char hex[] = "0123456789ABCDEF";
      spellable[b] = sentencepiece ? tokenizer->find(std::string{'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'}).has_value()
                                   : tokenizer->find(byte_token_text(b)).has_value();
    }
    if (sentencepiece && std::find(spellable.begin(), spellable.end(), false) != spellable.end()) {
      std::fprintf(stderr, "fuzz_tokenizer: %s: a SentencePiece vocabulary needs all 256 byte tokens here\n",
                   path.c_str());
      std::exit(2);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_tokenizer: cannot load the tokenizer of %s: %s\n", path.c_str(), e.what());
    std::exit(2);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  round_trip(text, /*parse_special=*/false);
  round_trip(text, /*parse_special=*/true);
  return 0;
}
