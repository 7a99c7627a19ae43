#include "daemon/tool_call_parser.hpp"

#include "daemon/dsml_tool_parser.hpp"
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
  return name.empty() || name == "hermes" || name == "mistral" || name == "llama3_json" || name == "deepseek_v32" ||
         name == "deepseek_v4";
}

std::unique_ptr<ToolCallParser> make_tool_call_parser(std::string_view name) {
  if (name == "mistral") return std::make_unique<MistralToolParser>();
  if (name == "llama3_json") return std::make_unique<Llama3JsonToolParser>();
  if (name == "deepseek_v4") return std::make_unique<DsmlToolParser>(kDsmlToolCalls);
  if (name == "deepseek_v32") return std::make_unique<DsmlToolParser>(kDsmlFunctionCalls);
  return std::make_unique<HermesToolParser>();
}

std::optional<ParsedToolCall> call_from_json(const boost::json::value& v,
                                             std::initializer_list<std::string_view> args_keys, bool only_known_keys) {
  if (!v.is_object()) return std::nullopt;
  const boost::json::object& o = v.get_object();
  const auto* name = o.if_contains("name");
  if (!name || !name->is_string() || name->get_string().empty()) return std::nullopt;
  const boost::json::value* args = nullptr;
  for (auto key : args_keys)
    if ((args = o.if_contains(key))) break;
  if (args && !args->is_object() && !args->is_null()) return std::nullopt;
  if (only_known_keys)
    for (const auto& [k, _] : o)
      if (k != "name" && k != "type" && std::find(args_keys.begin(), args_keys.end(), k) == args_keys.end())
        return std::nullopt;
  return ParsedToolCall{std::string(name->get_string()),
                        args && args->is_object() ? boost::json::serialize(*args) : std::string("{}")};
}

// ---- the tag-introduced formats ---------------------------------------------------

void TaggedToolParser::emit_text(std::string_view text, ToolCallSplit& out) {
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

ToolCallSplit TaggedToolParser::push(std::string_view text) {
  ToolCallSplit out;
  buf_ += text;
  while (true) {
    if (!in_call_) {
      const size_t at = buf_.find(tag_);
      if (at == std::string::npos) {
        const size_t keep = partial_tag(buf_, tag_);
        emit_text(std::string_view(buf_).substr(0, buf_.size() - keep), out);
        buf_.erase(0, buf_.size() - keep);
        return out;
      }
      emit_text(std::string_view(buf_).substr(0, at), out);
      ws_before_ = std::move(ws_);
      ws_.clear();
      buf_.erase(0, at + tag_.size());
      in_call_ = true;
    }
    std::vector<ParsedToolCall> calls;
    const std::optional<size_t> took = take_calls(buf_, calls);
    if (!took) return out;
    in_call_ = false;
    const std::string taken = buf_.substr(0, *took);
    buf_.erase(0, *took);
    if (calls.empty()) {  // malformed: shown as text, tag and all
      ws_ = std::move(ws_before_);
      ws_before_.clear();
      emit_text(std::string(tag_) + taken, out);
      continue;
    }
    calls_ += static_cast<int>(calls.size());
    out.calls.insert(out.calls.end(), std::make_move_iterator(calls.begin()), std::make_move_iterator(calls.end()));
    after_call_ = true;
    ws_before_.clear();
  }
}

ToolCallSplit TaggedToolParser::finish() {
  ToolCallSplit out;
  if (in_call_) {
    ws_ = std::move(ws_before_);
    emit_text(std::string(tag_) + buf_, out);
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

// ---- hermes ---------------------------------------------------------------------

HermesToolParser::HermesToolParser() : TaggedToolParser(kOpen) {}

std::optional<ParsedToolCall> HermesToolParser::parse_call(std::string_view body) {
  boost::system::error_code ec;
  const boost::json::value v = boost::json::parse(body, ec);
  if (ec) return std::nullopt;
  return call_from_json(v, {"arguments"}, false);
}

std::optional<size_t> HermesToolParser::take_calls(std::string_view after, std::vector<ParsedToolCall>& calls) {
  const size_t end = after.find(kClose);
  if (end == std::string_view::npos) return std::nullopt;
  if (auto call = parse_call(after.substr(0, end))) calls.push_back(std::move(*call));
  return end + kClose.size();
}

}  // namespace inferd::daemon
