// SentencePiece BPE as Llama-family GGUF vocabularies use it (GGUF
// `tokenizer.ggml.model` = "llama"): spaces are written as U+2581 ("▁"), the
// text is cut into UTF-8 characters, and adjacent pieces are merged while their
// concatenation is a token, the highest-scoring token first. What no token
// covers is spelled byte by byte with the byte-fallback tokens "<0xAB>".
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace inferd::engine::spm {

// The vocabulary as the merge reads it (views into a Tokenizer's tables).
struct Vocab {
  const std::unordered_map<std::string_view, int32_t>& ids;  // token text -> id
  std::span<const float> scores;                              // by id
  const std::array<int32_t, 256>& byte_tokens;                // "<0xAB>" (or the byte itself) -> id; -1: none
  int32_t unknown = -1;  // stands for a byte without a token; -1: such bytes are dropped
};

// "<0x0A>" -> 0x0A: the byte a byte-fallback token stands for; nullopt for other tokens.
std::optional<uint8_t> byte_token_value(std::string_view text);

// The text with every space written as "▁", after one more "▁" when
// `space_prefix` (the space SentencePiece puts before a text's first word).
std::string escape_spaces(std::string_view text, bool space_prefix);
// A token's text with every "▁" written back as a space.
std::string unescape_spaces(std::string_view token_text);

// Appends the ids of `escaped` (text from escape_spaces). Any bytes are
// accepted: malformed UTF-8 only ever reaches the byte-fallback tokens.
void encode(std::string_view escaped, const Vocab& vocab, std::vector<int32_t>& out);

// Whether no token has a "▁" after anything but "▁"s: then no merge joins a
// word to the "▁" that starts the next, and words() may cut the text there.
bool words_are_separate(std::span<const std::string> tokens);
// `escaped` cut before each "▁" that follows something else: pieces that
// encode() gives the same ids for, one by one, as for the whole text when the
// vocabulary's words are separate. Covers the text exactly, in order.
std::vector<std::string_view> words(std::string_view escaped);

}  // namespace inferd::engine::spm
