#include "engine/output/incremental_detokenizer.hpp"

#include "engine/utf8.hpp"

namespace inferd::engine {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(&tokenizer), skip_special_(skip_special) {}

std::string IncrementalDetokenizer::push(int32_t id) {
  held_ += tokenizer_->piece(id, skip_special_);
  std::string out;
  size_t i = 0;
  while (i < held_.size()) {
    utf8::Sequence q = utf8::classify(held_, i);
    if (q.status == utf8::Status::Truncated) break;  // wait for the next token
    if (q.status == utf8::Status::Complete) out.append(held_, i, q.length);
    else out.append(utf8::kReplacement);
    i += q.length;
  }
  held_.erase(0, i);
  return out;
}

std::string IncrementalDetokenizer::finish() {
  // Held bytes are one unfinished character at most: a single U+FFFD.
  std::string out = utf8::to_valid(held_);
  held_.clear();
  return out;
}

}  // namespace inferd::engine
