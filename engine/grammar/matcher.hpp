// A pushdown automaton over a Grammar's bytes: a stack of frames, one per value
// being written (the innermost on top). It is deterministic, so a state is one
// stack and checking a token costs its length in byte steps.
#pragma once
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "engine/grammar/grammar.hpp"

namespace inferd::engine::grammar {

// One value in progress. Trivial on purpose: trial runs copy frames by the
// thousand per step (see Matcher::accepts).
struct Frame {
  int32_t node;
  uint8_t phase;   // where in the value (per kind; 0 = nothing read yet)
  bool space;      // the optional space after ':' or ',' was written
  int16_t hex;     // string: \uXXXX digits read, or bytes due of a UTF-8 character
  int32_t count;   // array items, string bytes, digits, or offset into a key or literal
  int32_t prop;    // object: the property whose value comes next; string: next byte's range
  uint64_t seen;   // object: properties written; literals: those still matching
  uint64_t keys;   // object: properties whose key still matches the key being read
};

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const Grammar> grammar);

  // Advances over `bytes` if every one is accepted; otherwise changes nothing.
  bool accept(std::string_view bytes);
  // Whether accept(bytes) would succeed.
  bool accepts(std::string_view bytes) const;
  // The text so far is a whole value of the grammar.
  bool can_end() const;
  // It is whole and no byte may follow: generation is over.
  bool finished() const;
  // Inside a string's content, between characters (no escape or multi-byte
  // character begun): how many more characters it takes; -1 elsewhere. The
  // token mask's fast path: tokens of plain, whole characters need no trial.
  int string_room() const;
  // In free text (Kind::Text) with no part of its tag at the end: the tag's
  // first byte, as 0-255; -1 elsewhere. The token mask's other fast path: a
  // token without that byte keeps the text free, so it needs no trial.
  int free_text_tag() const;

  const Grammar& grammar() const { return *g_; }

 private:
  std::shared_ptr<const Grammar> g_;
  std::vector<Frame> stack_;
};

}  // namespace inferd::engine::grammar
