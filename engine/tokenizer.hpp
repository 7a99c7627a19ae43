// The tokenizers of GGUF models, by `tokenizer.ggml.model`:
// - "gpt2", byte-level BPE: text -> pre-tokenizer pieces -> bytes as GPT-2
//   "printable" characters -> merges by rank;
// - "llama", SentencePiece BPE (engine/sentencepiece_bpe.hpp): spaces as "▁",
//   merges by token score, byte-fallback tokens for what no token covers.
// Special tokens written in the text are matched first, for both.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/pretokenizer.hpp"

namespace inferd::engine {

class GgufFile;

// Token kinds, numbered as in GGUF `tokenizer.ggml.token_type`.
enum class TokenType : int32_t {
  Undefined = 0,
  Normal = 1,
  Unknown = 2,
  Control = 3,      // <|im_start|>, <|eot_id|>: parsed only on request, hidden when skipping specials
  UserDefined = 4,  // added tokens: always matched in text, always printed
  Unused = 5,
  Byte = 6,         // <0xAB>
};

enum class TokenizerModel {
  ByteLevelBpe,   // "gpt2"
  SentencePiece,  // "llama"
};

// A byte range [begin, end) of a text.
struct TextRange {
  size_t begin = 0, end = 0;
};

// Everything a tokenizer is built from; GGUF metadata or hand-made in tests.
struct TokenizerSpec {
  TokenizerModel model = TokenizerModel::ByteLevelBpe;
  std::vector<std::string> tokens;   // as stored: "Ġworld" (byte-level), "▁world" (SentencePiece)
  std::vector<int32_t> token_types;  // one TokenType per token; empty: all Normal
  std::vector<std::string> merges;   // byte-level: "left right", highest priority first
  std::string pre = "gpt2";          // byte-level: pre-tokenizer family, see PreTokenizer
  std::vector<float> scores;         // SentencePiece: one per token, higher merges first (-inf: never
                                     // made by a merge); empty: all 0
  bool add_space_prefix = false;     // SentencePiece: a space before the text and after each special token
  bool normalize_nfc = false;        // byte-level: text between special tokens is NFC-normalized first (Qwen)
  int32_t bos = -1, eos = -1, unk = -1, eot = -1, eom = -1;  // -1: none
  bool add_bos = false, add_eos = false;
};

class Tokenizer {
 public:
  // Throws std::invalid_argument when the spec is inconsistent (token types or
  // scores that do not match the tokens, special ids outside the vocabulary,
  // unknown pre).
  explicit Tokenizer(TokenizerSpec spec);
  // Reads the `tokenizer.ggml.*` metadata; throws LoadError naming the file.
  static std::unique_ptr<Tokenizer> from_gguf(const GgufFile& file);

  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // `add_special`: BOS/EOS around the text where the model asks for them.
  // `parse_special`: control tokens written in the text become their ids;
  // otherwise they are encoded as plain text. User-defined tokens always match.
  // Any bytes are accepted. Byte-level BPE reads those that do not begin a
  // well-formed UTF-8 character as U+FFFD; SentencePiece spells them with its
  // byte tokens (a lead byte takes the next bytes into its character whatever
  // they are, so a space among malformed bytes may come back as "▁"). Bytes the vocabulary has no token for become the unknown token
  // (SentencePiece, where it has one) or are dropped (both as llama.cpp does),
  // so decode(encode(x)) == x holds for well-formed text the vocabulary can
  // spell and no special token breaks.
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;
  // As encode(text, add_special, true), except inside the `plain` byte ranges of
  // the text: there control tokens are ordinary text, as with parse_special =
  // false. A chat prompt's message content is such a range (ChatTemplate::encode).
  std::vector<int32_t> encode(std::string_view text, bool add_special, std::span<const TextRange> plain) const;

  // The bytes the ids stand for (possibly cut inside a UTF-8 character when the
  // ids are; IncrementalDetokenizer handles that). `skip_special` drops control
  // tokens. Where the encoder puts a space before the text (add_space_prefix),
  // the first token's leading space is dropped. Throws std::out_of_range for an
  // id outside the vocabulary.
  std::string decode(std::span<const int32_t> ids, bool skip_special) const;
  // The bytes of one token, as decode() would append them after the first.
  std::string_view piece(int32_t id, bool skip_special) const;

  // The vocabulary entry as stored ("Ġworld", "<|im_end|>"); throws std::out_of_range.
  const std::string& token_text(int32_t id) const;
  TokenType token_type(int32_t id) const;
  std::optional<int32_t> find(std::string_view token_text) const;
  size_t vocab_size() const { return tokens_.size(); }
  TokenizerModel model() const { return model_; }

  int32_t bos() const { return bos_; }  // -1: none
  int32_t eos() const { return eos_; }
  bool add_bos() const { return add_bos_; }
  // Ids that end a generation: EOS, end-of-turn and end-of-message tokens.
  const std::vector<int32_t>& stop_ids() const { return stop_ids_; }
  const PreTokenizer& pre_tokenizer() const { return pre_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t result;
  };

  void check_id(int32_t id) const;
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special,
                              std::span<const TextRange> plain) const;
  void encode_text(std::string_view text, bool after_special, std::vector<int32_t>& out) const;
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
  std::vector<int32_t> bpe(std::string_view piece) const;
  std::vector<int32_t> spm_merge(std::string_view escaped) const;

  TokenizerModel model_;
  std::vector<std::string> tokens_;
  std::vector<TokenType> types_;
  std::vector<float> scores_;      // SentencePiece
  bool spm_words_separate_ = false;  // SentencePiece: text may be encoded word by word
  std::vector<std::string> decoded_;  // the bytes each token stands for
  std::unordered_map<std::string_view, int32_t> ids_;  // views into tokens_
  std::unordered_map<uint64_t, Merge> merges_;         // (left id, right id) -> merge
  std::array<int32_t, 256> byte_token_{};              // the token of each byte alone; -1 if absent
  std::vector<int32_t> specials_;  // matched in text before BPE, longest first
  std::vector<int32_t> stop_ids_;
  PreTokenizer pre_;
  int32_t bos_, eos_, unk_;
  bool add_bos_, add_eos_, add_space_prefix_, normalize_nfc_;

  // Pieces repeat a lot in real text; remember their ids.
  mutable std::mutex cache_mutex_;
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace inferd::engine
