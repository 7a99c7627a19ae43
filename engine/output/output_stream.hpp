// A request's text as its client sees it: sampled tokens are detokenized
// incrementally (an unfinished UTF-8 character waits for its next byte), and text
// that could still begin a stop string is held back until it cannot.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/output/incremental_detokenizer.hpp"
#include "engine/output/stop_matcher.hpp"

namespace inferd::engine {

class Tokenizer;

class OutputStream {
 public:
  OutputStream(const Tokenizer& tokenizer, bool skip_special_tokens, std::vector<std::string> stop_strings);

  // The text one more token lets out. Once a stop string matched, stopped() is
  // true and nothing from its start on is ever let out.
  std::string push(int32_t token);
  // Everything held back, at a natural end (length, or a stop token, whose own
  // text is never shown).
  std::string finish();

  bool stopped() const { return stops_.stopped(); }
  const std::string& matched() const { return stops_.matched(); }

 private:
  IncrementalDetokenizer detok_;
  StopMatcher stops_;
};

}  // namespace inferd::engine
