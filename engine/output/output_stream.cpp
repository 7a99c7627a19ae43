#include "engine/output/output_stream.hpp"

namespace inferd::engine {

OutputStream::OutputStream(const Tokenizer& tokenizer, bool skip_special_tokens, std::vector<std::string> stop_strings)
    : detok_(tokenizer, skip_special_tokens), stops_(std::move(stop_strings)) {}

std::string OutputStream::push(int32_t token) { return stops_.push(detok_.push(token)); }

std::string OutputStream::finish() {
  std::string text = stops_.push(detok_.finish());
  return text + stops_.flush();
}

}  // namespace inferd::engine
