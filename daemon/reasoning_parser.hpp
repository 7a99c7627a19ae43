// Splits a thinking model's output into its reasoning and its answer, as vLLM's
// reasoning parsers of the same names do, for whole texts and for text that
// arrives in arbitrary pieces (a piece that could still begin a tag is held back).
//   deepseek_r1: reasoning runs up to </think>; the <think> that opens it is
//                optional (DeepSeek-R1's template writes it into the prompt), and
//                an output that never closes it is all reasoning.
//   qwen3:       reasoning only inside a <think>...</think> the output begins
//                with; anything else is answer (Qwen3 with thinking off).
//   deepseek_v4: thinking on (the request's chat_template_kwargs `thinking` or
//                `enable_thinking` true, or neither given): as deepseek_r1, and
//                the reasoning also ends where a <｜DSML｜tool_calls> block begins
//                (the block stays in the answer, for the tool-call parser).
//                Thinking off: as qwen3, the same block ending a leading think
//                block. The reasoning's trailing whitespace is dropped.
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace inferd::daemon {

enum class ReasoningFormat { None, DeepSeekR1, Qwen3, DeepSeekV4 };

// "" → None; "deepseek_r1", "qwen3", "deepseek_v4"; nullopt for another name.
std::optional<ReasoningFormat> reasoning_format(std::string_view name);
inline constexpr std::string_view kReasoningParsers = "deepseek_r1, qwen3 or deepseek_v4";

struct ReasoningSplit {
  std::string reasoning;
  std::string content;
};

class ReasoningParser {
 public:
  // `thinking`: the request's switch, for formats that read it (deepseek_v4);
  // unset is the model's default (on).
  explicit ReasoningParser(ReasoningFormat format, std::optional<bool> thinking = std::nullopt);

  // The reasoning and answer text this piece lets out.
  ReasoningSplit push(std::string_view text);
  // Whatever was held back, at the end of the output.
  ReasoningSplit finish();

 private:
  enum class State { Start, Reasoning, Content };
  bool opens_in_reasoning_;  // the <think> is optional (in the prompt): output starts as reasoning
  bool ends_at_tool_calls_;  // a DSML tool-call block ends the reasoning
  bool trims_reasoning_;     // trailing whitespace of the reasoning is dropped
  State state_;
  std::string held_;
};

}  // namespace inferd::daemon
