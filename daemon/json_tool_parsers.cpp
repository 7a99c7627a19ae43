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

size_t partial_tag(std::string_view s, std::string_view tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n)
    if (tag.starts_with(s.substr(s.size() - n))) return n;
  return 0;
}

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

// {"name": "...", <args_key>: {...}}: the arguments an object (absent or null: {}).
std::optional<ParsedToolCall> call_of(const json::value& v, std::initializer_list<std::string_view> args_keys,
                                      bool only_known_keys) {
  if (!v.is_object()) return std::nullopt;
  const json::object& o = v.get_object();
  const auto* name = o.if_contains("name");
  if (!name || !name->is_string() || name->get_string().empty()) return std::nullopt;
  const json::value* args = nullptr;
  for (auto key : args_keys)
    if ((args = o.if_contains(key))) break;
  if (args && !args->is_object() && !args->is_null()) return std::nullopt;
  if (only_known_keys)
    for (const auto& [k, _] : o)
      if (k != "name" && k != "type" && std::find(args_keys.begin(), args_keys.end(), k) == args_keys.end())
        return std::nullopt;
  return ParsedToolCall{std::string(name->get_string()),
                        args && args->is_object() ? json::serialize(*args) : std::string("{}")};
}

}  // namespace

// ---- mistral ------------------------------------------------------------------

void MistralToolParser::emit_text(std::string_view text, ToolCallSplit& out) {
  std::string s = ws_ + std::string(text);
  ws_.clear();
  if (after_calls_) {
    const size_t b = s.find_first_not_of(kSpace);
    s.erase(0, b == std::string::npos ? s.size() : b);
    if (s.empty()) return;
    after_calls_ = false;
  }
  const size_t e = s.find_last_not_of(kSpace);
  const size_t keep = e == std::string::npos ? 0 : e + 1;
  ws_ = s.substr(keep);
  out.content.append(s, 0, keep);
}

void MistralToolParser::malformed(ToolCallSplit& out) {
  in_calls_ = false;
  ws_ = std::move(ws_before_);
  ws_before_.clear();
  emit_text(kToolCalls, out);
}

ToolCallSplit MistralToolParser::push(std::string_view text) {
  ToolCallSplit out;
  buf_ += text;
  while (true) {
    if (!in_calls_) {
      const size_t at = buf_.find(kToolCalls);
      if (at == std::string::npos) {
        const size_t keep = partial_tag(buf_, kToolCalls);
        emit_text(std::string_view(buf_).substr(0, buf_.size() - keep), out);
        buf_.erase(0, buf_.size() - keep);
        return out;
      }
      emit_text(std::string_view(buf_).substr(0, at), out);
      ws_before_ = std::move(ws_);
      ws_.clear();
      buf_.erase(0, at + kToolCalls.size());
      in_calls_ = true;
    }
    const size_t b = buf_.find_first_not_of(kSpace);
    if (b == std::string::npos) return out;
    if (buf_[b] != '[') {
      malformed(out);
      continue;
    }
    Scan s = scan_json(buf_);
    if (s.state == Scan::Incomplete) return out;
    std::vector<ParsedToolCall> calls;
    if (s.state == Scan::Complete && s.value.is_array() && !s.value.get_array().empty())
      for (const auto& v : s.value.get_array()) {
        auto call = call_of(v, {"arguments"}, false);
        if (!call) break;
        calls.push_back(std::move(*call));
      }
    if (calls.empty() || calls.size() != s.value.get_array().size()) {
      malformed(out);  // the array (or whatever it is) goes out as text next time round
      continue;
    }
    calls_ += static_cast<int>(calls.size());
    out.calls.insert(out.calls.end(), std::make_move_iterator(calls.begin()), std::make_move_iterator(calls.end()));
    buf_.erase(0, s.length);
    in_calls_ = false;
    after_calls_ = true;
    ws_before_.clear();
  }
}

ToolCallSplit MistralToolParser::finish() {
  ToolCallSplit out;
  if (in_calls_) {
    // An array never finished: a final parse (a bare number or the like) cannot make it calls.
    ws_ = std::move(ws_before_);
    emit_text(std::string(kToolCalls) + buf_, out);
  } else {
    emit_text(buf_, out);
  }
  buf_.clear();
  in_calls_ = false;
  if (calls_ == 0) out.content += ws_;
  ws_.clear();
  return out;
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
    auto call = s.state == Scan::Complete ? call_of(s.value, {"parameters", "arguments"}, true) : std::nullopt;
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
