// Splits a thinking model's output into its reasoning and its answer, as vLLM's
// reasoning parsers of the same names do, for whole texts and for text that
// arrives in arbitrary pieces (a piece that could still begin a tag is held back).
//   deepseek_r1: reasoning runs up to </think>; the <think> that opens it is
//                optional (DeepSeek-R1's template writes it into the prompt), and
//                an output that never closes it is all reasoning.
//   qwen3:       reasoning only inside a <think>...</think> the output begins
//                with; anything else is answer (Qwen3 with thinking off).
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace inferd::daemon {

enum class ReasoningFormat { None, DeepSeekR1, Qwen3 };

// "" → None; "deepseek_r1", "qwen3"; nullopt for another name.
std::optional<ReasoningFormat> reasoning_format(std::string_view name);
inline constexpr std::string_view kReasoningParsers = "deepseek_r1, qwen3";

struct ReasoningSplit {
  std::string reasoning;
  std::string content;
};

class ReasoningParser {
 public:
  explicit ReasoningParser(ReasoningFormat format);

  // The reasoning and answer text this piece lets out.
  ReasoningSplit push(std::string_view text);
  // Whatever was held back, at the end of the output.
  ReasoningSplit finish();

 private:
  enum class State { Start, Reasoning, Content };
  ReasoningFormat format_;
  State state_;
  std::string held_;
};

}  // namespace inferd::daemon
