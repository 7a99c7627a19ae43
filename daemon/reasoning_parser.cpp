#include "daemon/reasoning_parser.hpp"

#include <algorithm>

#include "daemon/dsml_tool_parser.hpp"

namespace inferd::daemon {
namespace {

constexpr std::string_view kOpen = "<think>", kClose = "</think>";
constexpr std::string_view kSpace = " \t\r\n";

// Length of the longest end of `s` that is a proper start of `tag`: text that
// may still become the tag once more arrives.
size_t partial_tag(std::string_view s, std::string_view tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n)
    if (tag.starts_with(s.substr(s.size() - n))) return n;
  return 0;
}

// `s` without its trailing whitespace: its length.
size_t trimmed(std::string_view s) {
  const size_t e = s.find_last_not_of(kSpace);
  return e == std::string_view::npos ? 0 : e + 1;
}

}  // namespace

std::optional<ReasoningFormat> reasoning_format(std::string_view name) {
  if (name.empty()) return ReasoningFormat::None;
  if (name == "deepseek_r1") return ReasoningFormat::DeepSeekR1;
  if (name == "qwen3") return ReasoningFormat::Qwen3;
  if (name == "deepseek_v4") return ReasoningFormat::DeepSeekV4;
  return std::nullopt;
}

ReasoningParser::ReasoningParser(ReasoningFormat format, std::optional<bool> thinking)
    : opens_in_reasoning_(format == ReasoningFormat::DeepSeekR1 ||
                          (format == ReasoningFormat::DeepSeekV4 && thinking != false)),
      ends_at_tool_calls_(format == ReasoningFormat::DeepSeekV4),
      trims_reasoning_(format == ReasoningFormat::DeepSeekV4),
      state_(format == ReasoningFormat::None ? State::Content : State::Start) {}

ReasoningSplit ReasoningParser::push(std::string_view text) {
  ReasoningSplit out;
  held_ += text;
  if (state_ == State::Start) {
    if (held_.size() < kOpen.size() && kOpen.starts_with(held_)) return out;  // may still be <think>
    if (held_.starts_with(kOpen)) {
      held_.erase(0, kOpen.size());
      state_ = State::Reasoning;
    } else {
      state_ = opens_in_reasoning_ ? State::Reasoning : State::Content;
    }
  }
  if (state_ == State::Reasoning) {
    // The reasoning ends at </think> (dropped) or at a tool-call block (kept for the answer).
    size_t at = held_.find(kClose), skip = kClose.size();
    if (const size_t t = ends_at_tool_calls_ ? held_.find(kDsmlToolCalls) : std::string::npos; t < at) {
      at = t;
      skip = 0;
    }
    if (at == std::string::npos) {
      size_t keep = partial_tag(held_, kClose);
      if (ends_at_tool_calls_) keep = std::max(keep, partial_tag(held_, kDsmlToolCalls));
      size_t emit = held_.size() - keep;
      if (trims_reasoning_) emit = trimmed(std::string_view(held_).substr(0, emit));  // may be the end
      out.reasoning = held_.substr(0, emit);
      held_.erase(0, emit);
      return out;
    }
    out.reasoning = held_.substr(0, trims_reasoning_ ? trimmed(std::string_view(held_).substr(0, at)) : at);
    held_.erase(0, at + skip);
    state_ = State::Content;
  }
  out.content = std::move(held_);
  held_.clear();
  return out;
}

ReasoningSplit ReasoningParser::finish() {
  ReasoningSplit out;
  // A held piece that never became a tag is text of the part it was in.
  if (state_ == State::Reasoning || (state_ == State::Start && opens_in_reasoning_))
    out.reasoning = held_.substr(0, trims_reasoning_ ? trimmed(held_) : held_.size());
  else
    out.content = std::move(held_);
  held_.clear();
  state_ = State::Content;
  return out;
}

}  // namespace inferd::daemon
