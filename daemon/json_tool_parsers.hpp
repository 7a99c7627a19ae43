// Tool-call formats written as bare JSON, read as vLLM's parsers of the same
// names read them (daemon/tool_call_parser.hpp has the interface and hermes):
//
//   mistral      [TOOL_CALLS] followed by a JSON array of {"name", "arguments"}
//                objects; text before the tag (and after the array) is the answer.
//   llama3_json  the whole output a JSON object {"name", "parameters"} (or
//                "arguments"), optionally after <|python_tag|>, several joined
//                by ";"; output starting with anything but "{" is the answer.
//
// As with hermes, the output may arrive in any pieces and gives the same split
// as when whole: a possible tag start or an unfinished JSON value is held back,
// a call comes out once its JSON is complete and valid, and JSON that turns out
// not to be calls is the answer's text, shown whole, never dropped.
#pragma once
#include <string>
#include <string_view>

#include "daemon/tool_call_parser.hpp"

namespace inferd::daemon {

class MistralToolParser final : public TaggedToolParser {
 public:
  MistralToolParser();

 private:
  std::optional<size_t> take_calls(std::string_view after, std::vector<ParsedToolCall>& calls) override;
};

class Llama3JsonToolParser : public ToolCallParser {
 public:
  ToolCallSplit push(std::string_view text) override;
  ToolCallSplit finish() override;
  int calls() const override { return calls_; }

 private:
  enum class State { Start, Calls, Text };
  // The rest of the output is the answer, from `from` in buf_ (all of it, with
  // the lead, before the first call).
  ToolCallSplit& to_text(ToolCallSplit& out, size_t from);

  State state_ = State::Start;
  std::string buf_;   // held back: leading whitespace or tag, or the output after the last call
  std::string lead_;  // what came before the first "{" (whitespace, <|python_tag|>)
  int calls_ = 0;
};

}  // namespace inferd::daemon
