#include "daemon/dsml_tool_parser.hpp"

#include <algorithm>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

namespace inferd::daemon {
namespace {

namespace json = boost::json;

constexpr std::string_view kInvoke = "<｜DSML｜invoke", kInvokeEnd = "</｜DSML｜invoke>";
constexpr std::string_view kParameter = "<｜DSML｜parameter", kParameterEnd = "</｜DSML｜parameter>";
constexpr std::string_view kSpace = " \t\r\n";

// Reads a block body left to right; every step says whether what it expected was there.
struct Reader {
  std::string_view s;
  size_t at = 0;

  bool done() const { return at == s.size(); }
  bool space() {  // any whitespace; true when there was some
    const size_t b = at;
    at = std::min(s.size(), s.find_first_not_of(kSpace, at));
    return at > b;
  }
  bool eat(std::string_view lit) {
    if (!s.substr(at).starts_with(lit)) return false;
    at += lit.size();
    return true;
  }
  // The text up to `end`, which is passed.
  std::optional<std::string_view> until(std::string_view end) {
    const size_t e = s.find(end, at);
    if (e == std::string_view::npos) return std::nullopt;
    const std::string_view text = s.substr(at, e - at);
    at = e + end.size();
    return text;
  }
  // ` key="value"` (whitespace before it, none around "="); the value has no quote.
  std::optional<std::string_view> attribute(std::string_view key) {
    const size_t b = at;
    if (space() && eat(key) && eat("=\""))
      if (auto v = until("\"")) return v;
    at = b;
    return std::nullopt;
  }
  // The end of an opening tag: optional whitespace, then ">".
  bool close_tag() {
    space();
    return eat(">");
  }
};

// A parameter's value as vLLM's deepseek parsers take it: string="true" is text,
// anything else JSON when it parses.
json::value parameter_value(std::string_view text, std::optional<std::string_view> is_string) {
  if (is_string != "true") {
    boost::system::error_code ec;
    json::value v = json::parse(text, ec);
    if (!ec) return v;
  }
  return json::string(text);
}

std::optional<ParsedToolCall> read_invoke(Reader& r) {
  if (!r.eat(kInvoke)) return std::nullopt;
  const auto name = r.attribute("name");
  if (!name || name->empty() || !r.close_tag()) return std::nullopt;
  json::object args;
  while (true) {
    r.space();
    if (r.eat(kInvokeEnd)) break;
    if (!r.eat(kParameter)) return std::nullopt;
    const auto key = r.attribute("name");
    if (!key || key->empty()) return std::nullopt;
    const auto is_string = r.attribute("string");
    if (!r.close_tag()) return std::nullopt;
    const auto value = r.until(kParameterEnd);
    if (!value) return std::nullopt;
    args[*key] = parameter_value(*value, is_string);
  }
  // The name and text values are the model's bytes: a call whose JSON would not
  // read back (bytes that are not UTF-8) is malformed, like any other.
  boost::system::error_code ec;
  json::parse(json::serialize(json::array{json::string(*name), args}), ec);
  if (ec) return std::nullopt;
  return ParsedToolCall{std::string(*name), json::serialize(args)};
}

// The invokes between a block's tags as calls; nullopt unless the body is one
// or more well-formed invokes and nothing else but whitespace.
std::optional<std::vector<ParsedToolCall>> parse_block(std::string_view body) {
  Reader r{body};
  std::vector<ParsedToolCall> calls;
  r.space();
  while (!r.done()) {
    auto call = read_invoke(r);
    if (!call) return std::nullopt;
    calls.push_back(std::move(*call));
    r.space();
  }
  if (calls.empty()) return std::nullopt;
  return calls;
}

}  // namespace

DsmlToolParser::DsmlToolParser(std::string_view block)
    : TaggedToolParser(block), close_("</" + std::string(block.substr(1))) {}

std::optional<size_t> DsmlToolParser::take_calls(std::string_view after, std::vector<ParsedToolCall>& calls) {
  const size_t end = after.find(close_);
  if (end == std::string_view::npos) return std::nullopt;
  if (auto block = parse_block(after.substr(0, end))) calls = std::move(*block);
  return end + close_.size();
}

}  // namespace inferd::daemon
