#include "daemon/json_tool_parsers.hpp"

#include <algorithm>
#include <optional>

#include <boost/json/serialize.hpp>
#include <boost/json/stream_parser.hpp>
#include <boost/json/value.hpp>

namespace inferd::daemon {
namespace {

namespace json = boost::json;

constexpr std::string_view kToolCalls = "[TOOL_CALLS]";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kSpace = " \t\r\n";

// A JSON value at the start of `s` (leading whitespace allowed): complete, with
// the characters it took; incomplete (more text may finish it); or invalid.
struct Scan {
  enum { Incomplete, Invalid, Complete } state = Incomplete;
  size_t length = 0;
  json::value value;
};

Scan scan_json(std::string_view s) {
  json::stream_parser p;
  json::error_code ec;
  const size_t n = p.write_some(s.data(), s.size(), ec);
  if (ec) return {Scan::Invalid, 0, {}};
  if (!p.done()) return {Scan::Incomplete, 0, {}};
  return {Scan::Complete, n, p.release()};
}

}  // namespace

// ---- mistral ------------------------------------------------------------------

MistralToolParser::MistralToolParser() : TaggedToolParser(kToolCalls) {}

std::optional<size_t> MistralToolParser::take_calls(std::string_view after, std::vector<ParsedToolCall>& calls) {
  const size_t b = after.find_first_not_of(kSpace);
  if (b == std::string_view::npos) return std::nullopt;
  if (after[b] != '[') return 0;  // not an array: only the tag is text
  const Scan s = scan_json(after);
  if (s.state == Scan::Incomplete) return std::nullopt;
  if (s.state == Scan::Complete && s.value.is_array())
    for (const auto& v : s.value.get_array()) {
      auto call = call_from_json(v, {"arguments"}, false);
      if (!call) {
        calls.clear();
        break;
      }
      calls.push_back(std::move(*call));
    }
  return calls.empty() ? 0 : s.length;  // an array that is not all calls is text, read again for tags
}

// ---- llama3_json ----------------------------------------------------------------

ToolCallSplit& Llama3JsonToolParser::to_text(ToolCallSplit& out, size_t from) {
  state_ = State::Text;
  out.content += calls_ == 0 ? lead_ + buf_ : buf_.substr(from);
  lead_.clear();
  buf_.clear();
  return out;
}

ToolCallSplit Llama3JsonToolParser::push(std::string_view text) {
  ToolCallSplit out;
  buf_ += text;
  if (state_ == State::Start) {
    size_t b = buf_.find_first_not_of(kSpace);
    if (b == std::string::npos) return out;
    const std::string_view rest = std::string_view(buf_).substr(b);
    if (rest.starts_with(kPythonTag)) {
      b = buf_.find_first_not_of(kSpace, b + kPythonTag.size());
      if (b == std::string::npos) return out;
    } else if (kPythonTag.starts_with(rest)) {
      return out;  // may still be the tag
    }
    if (buf_[b] != '{') return to_text(out, 0);
    lead_ = buf_.substr(0, b);
    buf_.erase(0, b);
    state_ = State::Calls;
  }
  if (state_ == State::Text) {
    out.content += buf_;
    buf_.clear();
    return out;
  }
  while (true) {
    // buf_: a call's JSON, or after a call: whitespace, ";", whitespace, the next call.
    size_t at = 0;
    if (calls_ > 0) {
      const size_t b = buf_.find_first_not_of(kSpace);
      if (b == std::string::npos) return out;
      if (buf_[b] != ';') return to_text(out, b);
      const size_t c = buf_.find_first_not_of(kSpace, b + 1);
      if (c == std::string::npos) return out;
      if (buf_[c] != '{') return to_text(out, b);
      at = c;
    }
    Scan s = scan_json(std::string_view(buf_).substr(at));
    if (s.state == Scan::Incomplete) return out;
    auto call = s.state == Scan::Complete ? call_from_json(s.value, {"parameters", "arguments"}, true) : std::nullopt;
    if (!call) return to_text(out, buf_.find_first_not_of(kSpace));
    out.calls.push_back(std::move(*call));
    ++calls_;
    buf_.erase(0, at + s.length);
  }
}

ToolCallSplit Llama3JsonToolParser::finish() {
  ToolCallSplit out;
  if (state_ == State::Calls && calls_ > 0) {
    // Whitespace after the last call is not text; an unfinished next call is.
    const size_t b = buf_.find_first_not_of(kSpace);
    if (b != std::string::npos) out.content = buf_.substr(b);
  } else {
    out.content = lead_ + buf_;
  }
  buf_.clear();
  lead_.clear();
  state_ = State::Text;
  return out;
}

}  // namespace inferd::daemon
