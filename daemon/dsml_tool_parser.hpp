// DeepSeek's DSML tool calls, read as vLLM's parsers of the same names read them
// (daemon/tool_call_parser.hpp has the interface):
//
//   deepseek_v4   <｜DSML｜tool_calls>
//                 <｜DSML｜invoke name="get_weather">
//                 <｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>
//                 <｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>
//                 </｜DSML｜invoke>
//                 ...more invokes...
//                 </｜DSML｜tool_calls>
//   deepseek_v32  the same inside <｜DSML｜function_calls>...</｜DSML｜function_calls>
//
// ("｜" is U+FF5C.) Each invoke is a call; its parameters make the arguments
// object: a string="true" value is that text as a JSON string, any other value
// (string="false", or no string attribute) is read as JSON, and is the text as
// a string when it is not JSON. A later parameter of the same name replaces an
// earlier one.
//
// As with hermes, text may arrive in any pieces and gives the same split as when
// whole: a possible block start is held back, the calls come out when the block
// closes, and a block that is not all well-formed invokes (or never closes) is
// the answer's text, tags and all. Text after a block is the answer's too.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/tool_call_parser.hpp"

namespace inferd::daemon {

// What opens DeepSeek-V4's calls (its reasoning ends there even without
// </think>), and DeepSeek-V3.2's.
inline constexpr std::string_view kDsmlToolCalls = "<｜DSML｜tool_calls>";
inline constexpr std::string_view kDsmlFunctionCalls = "<｜DSML｜function_calls>";

class DsmlToolParser final : public TaggedToolParser {
 public:
  // `block`: kDsmlToolCalls (deepseek_v4) or kDsmlFunctionCalls (deepseek_v32).
  explicit DsmlToolParser(std::string_view block);

 private:
  std::optional<size_t> take_calls(std::string_view after, std::vector<ParsedToolCall>& calls) override;

  std::string close_;  // </｜DSML｜tool_calls> or </｜DSML｜function_calls>
};

}  // namespace inferd::daemon
