// Pre-tokenization: the regex split of text into the pieces that byte-level BPE
// then encodes one by one. Each model family (GGUF `tokenizer.ggml.pre`) has its
// own patterns; they run in order, each over the pieces the previous one left.
#pragma once
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace inferd::engine {

class PreTokenizer {
 public:
  // `name` is a GGUF `tokenizer.ggml.pre` value ("gpt2", "smollm", "llama3",
  // "qwen2", "deepseek-v3", ... see pretokenizer.cpp); throws std::invalid_argument naming it
  // when it is unknown.
  explicit PreTokenizer(std::string_view name);
  ~PreTokenizer();
  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;

  // Views into `text` that cover it exactly, in order; none is empty. Bytes that
  // are not valid UTF-8 never match a pattern and end up in pieces of their own.
  std::vector<std::string_view> split(std::string_view text) const;

  const std::string& name() const { return name_; }
  // The regex of GPT-2's split (what a byte-level pre-tokenizer uses by itself)
  // and the one that isolates digits.
  static std::string_view gpt2_pattern();
  static std::string_view digits_pattern();
  // The family that runs exactly these regexes in this order (a Hugging Face
  // tokenizer.json spells its pre-tokenizer this way); nullopt if none does.
  static std::optional<std::string> family_of(std::span<const std::string> patterns);
  // Families whose BPE takes a whole piece that is itself in the vocabulary
  // without running the merges (Llama 3).
  bool ignore_merges() const { return ignore_merges_; }

 private:
  struct Pattern;
  std::string name_;
  bool ignore_merges_ = false;
  std::vector<std::unique_ptr<Pattern>> patterns_;
};

}  // namespace inferd::engine
