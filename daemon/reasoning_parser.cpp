#include "daemon/reasoning_parser.hpp"

#include <algorithm>

namespace inferd::daemon {
namespace {

constexpr std::string_view kOpen = "<think>", kClose = "</think>";

// Length of the longest end of `s` that is a proper start of `tag`: text that
// may still become the tag once more arrives.
size_t partial_tag(std::string_view s, std::string_view tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n)
    if (tag.starts_with(s.substr(s.size() - n))) return n;
  return 0;
}

}  // namespace

std::optional<ReasoningFormat> reasoning_format(std::string_view name) {
  if (name.empty()) return ReasoningFormat::None;
  if (name == "deepseek_r1") return ReasoningFormat::DeepSeekR1;
  if (name == "qwen3") return ReasoningFormat::Qwen3;
  return std::nullopt;
}

ReasoningParser::ReasoningParser(ReasoningFormat format)
    : format_(format), state_(format == ReasoningFormat::None ? State::Content : State::Start) {}

ReasoningSplit ReasoningParser::push(std::string_view text) {
  ReasoningSplit out;
  held_ += text;
  if (state_ == State::Start) {
    if (held_.size() < kOpen.size() && kOpen.starts_with(held_)) return out;  // may still be <think>
    if (held_.starts_with(kOpen)) {
      held_.erase(0, kOpen.size());
      state_ = State::Reasoning;
    } else {
      state_ = format_ == ReasoningFormat::DeepSeekR1 ? State::Reasoning : State::Content;
    }
  }
  if (state_ == State::Reasoning) {
    if (const size_t at = held_.find(kClose); at != std::string::npos) {
      out.reasoning = held_.substr(0, at);
      held_.erase(0, at + kClose.size());
      state_ = State::Content;
    } else {
      const size_t keep = partial_tag(held_, kClose);
      out.reasoning = held_.substr(0, held_.size() - keep);
      held_.erase(0, held_.size() - keep);
      return out;
    }
  }
  out.content = std::move(held_);
  held_.clear();
  return out;
}

ReasoningSplit ReasoningParser::finish() {
  ReasoningSplit out;
  // A held piece that never became a tag is text of the part it was in.
  const bool reasoning = state_ == State::Reasoning || (state_ == State::Start && format_ == ReasoningFormat::DeepSeekR1);
  (reasoning ? out.reasoning : out.content) = std::move(held_);
  held_.clear();
  state_ = State::Content;
  return out;
}

}  // namespace inferd::daemon
