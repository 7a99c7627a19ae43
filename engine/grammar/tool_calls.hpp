// The grammar of tool calls as the hermes format writes them (the chat
// template's own layout, engine/chat_template.cpp):
//
//   <tool_call>\n{"name": "get_weather", "arguments": {...}}\n</tool_call>
//
// one or more, separated by a newline, for tool_choice `required` or a named
// function: the name is one of the tools' and the arguments a value of that
// tool's parameters grammar (compile_json_schema), so every call the model
// writes parses and validates.
#pragma once
#include <string>
#include <vector>

#include "engine/grammar/grammar.hpp"

namespace inferd::engine::grammar {

struct ToolGrammar {
  std::string name;     // a function name: no byte that JSON would escape
  Grammar parameters;   // its arguments; the root must be an object
};

// Calls from `min_calls` to `max_calls` (-1: no bound), each to one of
// `tools`. Throws std::invalid_argument for an empty list, more than
// kMaxChoices tools, a repeated or empty name, or parameters that are not an object.
Grammar tool_calls_grammar(const std::vector<ToolGrammar>& tools, int min_calls, int max_calls);

// The same calls as DeepSeek's DSML writes them (the deepseek_v4 and
// deepseek_v32 templates' layout), `block` "tool_calls" (V4) or
// "function_calls" (V3.2):
//
//   <｜DSML｜tool_calls>
//   <｜DSML｜invoke name="get_weather">
//   <｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>
//   <｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>
//   </｜DSML｜invoke>
//   </｜DSML｜tool_calls>
//
// Parameters come in declared order, the required ones always; a string
// parameter is raw text (string="true": any text without the closing tag, or
// one of its enum's values), any other its JSON value (string="false"), whose
// strings write '<' only escaped (so no closing tag appears inside them).
// max_calls is 1 or -1 (no bound). Throws std::invalid_argument as
// tool_calls_grammar does, and for parameters DSML cannot hold to their schema
// (free keys, a name with `"`, `<`, `>` or a line break): the caller then
// writes the calls as hermes.
Grammar dsml_tool_calls_grammar(const std::vector<ToolGrammar>& tools, int max_calls, const std::string& block);

// Free text in which every <tool_call> block is a call to one of `tools`, as
// above (tool_choice auto with strict tools): the text is free until the
// model writes the tag, the call is held to the grammar, and free text may
// follow. Throws as tool_calls_grammar does.
Grammar tool_calls_in_text_grammar(const std::vector<ToolGrammar>& tools);

}  // namespace inferd::engine::grammar
