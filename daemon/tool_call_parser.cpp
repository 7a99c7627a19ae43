#include "daemon/tool_call_parser.hpp"

#include "daemon/json_tool_parsers.hpp"

#include <algorithm>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

namespace inferd::daemon {
namespace {

constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>";
constexpr std::string_view kSpace = " \t\r\n";

size_t partial_tag(std::string_view s, std::string_view tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n)
    if (tag.starts_with(s.substr(s.size() - n))) return n;
  return 0;
}

}  // namespace

bool known_tool_call_parser(std::string_view name) {
  return name.empty() || name == "hermes" || name == "mistral" || name == "llama3_json";
}

std::unique_ptr<ToolCallParser> make_tool_call_parser(std::string_view name) {
  if (name == "mistral") return std::make_unique<MistralToolParser>();
  if (name == "llama3_json") return std::make_unique<Llama3JsonToolParser>();
  return std::make_unique<HermesToolParser>();
}

std::optional<ParsedToolCall> HermesToolParser::parse_call(std::string_view body) {
  boost::system::error_code ec;
  const boost::json::value v = boost::json::parse(body, ec);
  if (ec || !v.is_object()) return std::nullopt;
  const boost::json::object& o = v.get_object();
  const auto* name = o.if_contains("name");
  if (!name || !name->is_string() || name->get_string().empty()) return std::nullopt;
  const auto* args = o.if_contains("arguments");
  if (args && !args->is_object() && !args->is_null()) return std::nullopt;
  return ParsedToolCall{std::string(name->get_string()),
                        args && args->is_object() ? boost::json::serialize(*args) : std::string("{}")};
}

void HermesToolParser::emit_text(std::string_view text, ToolCallSplit& out) {
  std::string s = ws_ + std::string(text);
  ws_.clear();
  if (after_call_) {
    const size_t b = s.find_first_not_of(kSpace);
    s.erase(0, b == std::string::npos ? s.size() : b);
    if (s.empty()) return;
    after_call_ = false;
  }
  const size_t e = s.find_last_not_of(kSpace);
  const size_t keep = e == std::string::npos ? 0 : e + 1;
  ws_ = s.substr(keep);
  out.content.append(s, 0, keep);
}

ToolCallSplit HermesToolParser::push(std::string_view text) {
  ToolCallSplit out;
  buf_ += text;
  while (true) {
    if (!in_call_) {
      const size_t at = buf_.find(kOpen);
      if (at == std::string::npos) {
        const size_t keep = partial_tag(buf_, kOpen);
        emit_text(std::string_view(buf_).substr(0, buf_.size() - keep), out);
        buf_.erase(0, buf_.size() - keep);
        return out;
      }
      emit_text(std::string_view(buf_).substr(0, at), out);
      ws_before_ = std::move(ws_);
      ws_.clear();
      buf_.erase(0, at + kOpen.size());
      in_call_ = true;
    }
    const size_t end = buf_.find(kClose);
    if (end == std::string::npos) return out;
    const std::string body = buf_.substr(0, end);
    buf_.erase(0, end + kClose.size());
    in_call_ = false;
    if (auto call = parse_call(body)) {
      out.calls.push_back(std::move(*call));
      ++calls_;
      after_call_ = true;
      ws_before_.clear();
    } else {
      ws_ = std::move(ws_before_);
      ws_before_.clear();
      emit_text(std::string(kOpen) + body + std::string(kClose), out);
    }
  }
}

ToolCallSplit HermesToolParser::finish() {
  ToolCallSplit out;
  if (in_call_) {
    ws_ = std::move(ws_before_);
    emit_text(std::string(kOpen) + buf_, out);
  } else {
    emit_text(buf_, out);
  }
  buf_.clear();
  in_call_ = false;
  // Trailing whitespace is the answer's own unless calls were made.
  if (calls_ == 0) out.content += ws_;
  ws_.clear();
  return out;
}

}  // namespace inferd::daemon
