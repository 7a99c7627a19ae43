// Streaming detokenization: token ids go in one at a time, text comes out as
// soon as it is whole. A character split across tokens (emoji, CJK in a
// byte-level vocabulary) is held back until its last byte arrives, so no
// emitted chunk ever ends in half a UTF-8 character.
#pragma once
#include <cstdint>
#include <string>

#include "engine/tokenizer.hpp"

namespace inferd::engine {

class IncrementalDetokenizer {
 public:
  // `tokenizer` must outlive this object. `skip_special`: control tokens add
  // no text (as Tokenizer::decode).
  explicit IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special = true);

  // Appends one token; returns the text it completed (often empty or one
  // piece, sometimes more when it finished a held-back character). Bytes that
  // can never form a character come out as U+FFFD right away. Throws
  // std::out_of_range for an id outside the vocabulary.
  std::string push(int32_t id);

  // Ends the stream: returns whatever was held back, an unfinished character
  // as U+FFFD. The object can then start a new stream.
  std::string finish();

  size_t held_bytes() const { return held_.size(); }

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::string held_;  // the tail that may still become a character
};

}  // namespace inferd::engine
