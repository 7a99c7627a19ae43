// Tool calls in a model's output, read as vLLM's --tool-call-parser reads them.
// ToolCallParser is what a chat request's output goes through; HermesToolParser
// (here), the bare-JSON formats (daemon/json_tool_parsers.hpp) and DeepSeek's
// DSML (daemon/dsml_tool_parser.hpp) implement it.
//
// hermes: <tool_call>{"name": "...", "arguments": {...}}</tool_call>, any number of them,
// with the text outside them as the answer. Text arrives in arbitrary pieces;
// a piece that could still begin <tool_call> is held back, so a tag never
// leaks out as text, and a call comes out whole once its closing tag arrives
// (not as it is written: until then it may still turn out malformed, and a
// malformed call is shown as text).
//
// The answer is the text outside the calls less the whitespace next to them
// (the newlines models write between calls), the same whether the output
// arrives whole or in pieces. A call whose body is not a JSON object with a
// string "name" (and an object "arguments", if any) is text of the answer, tags
// and all: a malformed call is shown, never dropped.
#pragma once
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace boost::json {
class value;
}

namespace inferd::daemon {

// vLLM's --tool-call-parser names this server implements.
inline constexpr std::string_view kToolCallParsers = "hermes, mistral, llama3_json, deepseek_v32 or deepseek_v4";
// "" (take the chat template's format) or a name above.
bool known_tool_call_parser(std::string_view name);

struct ParsedToolCall {
  std::string name;
  std::string arguments;  // the JSON text of an object
};

struct ToolCallSplit {
  std::string content;
  std::vector<ParsedToolCall> calls;
};

class ToolCallParser {
 public:
  virtual ~ToolCallParser() = default;
  // The answer text and the whole calls this piece lets out.
  virtual ToolCallSplit push(std::string_view text) = 0;
  // Whatever was held back, at the end of the output: an unfinished call is text.
  virtual ToolCallSplit finish() = 0;
  // Calls found so far.
  virtual int calls() const = 0;
};

// The parser a name above stands for; "" is hermes.
std::unique_ptr<ToolCallParser> make_tool_call_parser(std::string_view name);

// {"name": "...", <one of args_keys>: {...}} as a call (the arguments absent or
// null: {}); with `only_known_keys`, any other key but "type" makes it no call.
std::optional<ParsedToolCall> call_from_json(const boost::json::value& v,
                                             std::initializer_list<std::string_view> args_keys, bool only_known_keys);

// What the formats whose calls follow a tag share (hermes: <tool_call>, mistral:
// [TOOL_CALLS], DSML: <｜DSML｜tool_calls>): the text outside calls goes out less the whitespace next to
// them; text that may still begin the tag is held back; calls that turn out
// malformed, or never end, are text again, tag and all.
class TaggedToolParser : public ToolCallParser {
 public:
  ToolCallSplit push(std::string_view text) final;
  ToolCallSplit finish() final;
  int calls() const final { return calls_; }

 protected:
  explicit TaggedToolParser(std::string_view tag) : tag_(tag) {}
  // The calls at the start of `after` (what follows the tag): how many characters
  // they took, with `calls` filled; nullopt while they may still be unfinished;
  // with `calls` left empty, the characters to show as text after the tag.
  virtual std::optional<size_t> take_calls(std::string_view after, std::vector<ParsedToolCall>& calls) = 0;

 private:
  void emit_text(std::string_view text, ToolCallSplit& out);

  std::string_view tag_;
  std::string buf_;          // not yet let out: a possible tag start, or what follows an open tag
  bool in_call_ = false;     // after the tag, before its calls end
  std::string ws_;           // whitespace at the end of the text so far: dropped if a call follows
  std::string ws_before_;    // that whitespace, kept while a call is open in case it is malformed
  bool after_call_ = false;  // the last thing let out was a call: leading whitespace is dropped
  int calls_ = 0;
};

class HermesToolParser final : public TaggedToolParser {
 public:
  HermesToolParser();
  // A call's body (between the tags) as a call, or nullopt when malformed.
  static std::optional<ParsedToolCall> parse_call(std::string_view body);

 private:
  std::optional<size_t> take_calls(std::string_view after, std::vector<ParsedToolCall>& calls) override;
};

}  // namespace inferd::daemon
