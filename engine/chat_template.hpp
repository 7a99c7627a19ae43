// Chat templates without a Jinja engine: the model's `tokenizer.chat_template`
// text only selects a family, and each family is rendered here exactly as its
// template renders it. The result carries the template's special tokens as
// text; encode() parses them there and only there, so a message that contains
// "<|im_end|>" is that text, never the control token.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer.hpp"

namespace inferd::engine {

class GgufFile;

// A call an assistant turn made: the function's name and its arguments as the
// JSON text of an object.
struct ChatToolCall {
  std::string name;
  std::string arguments;
};

struct ChatMessage {
  std::string role;  // system, user, assistant or tool
  std::string content;
  std::vector<ChatToolCall> tool_calls = {};  // assistant
  std::string tool_call_id = {};               // tool: the call this answers
};

// What a request adds to its messages.
struct ChatOptions {
  // Each tool's definition as JSON text ({"type":"function","function":{...}}).
  // Empty: no tools section.
  std::vector<std::string> tools;
  // chat_template_kwargs.enable_thinking (or `thinking`, DeepSeek's name for
  // it), for templates that read it (Qwen3); unset: the template's default
  // (thinking on).
  std::optional<bool> enable_thinking;
};

// A rendered prompt: its text and where the messages' content lies in it.
struct ChatPrompt {
  std::string text;
  std::vector<TextRange> content;  // plain text: control tokens there are not parsed
};

// Messages the template cannot render; what() names the message index.
struct ChatTemplateError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

class ChatTemplate {
 public:
  enum class Family {
    ChatML,  // <|im_start|>role\ncontent<|im_end|>\n (SmolLM2, Qwen2)
    Llama3,  // <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>
    Plain,   // role: content\n, for models without a recognised template
  };

  // `default_system`: the system message the template inserts when the first
  // message is not one (SmolLM2's "You are a helpful AI assistant named SmolLM,
  // ..."); empty for none. `bos_text`: the BOS token's text, for families whose
  // template writes it (Llama 3).
  explicit ChatTemplate(Family family, std::string default_system = {}, std::string bos_text = {});

  // Recognises the family (and a ChatML default system message) in a Jinja
  // template's text. Never fails: an unrecognised template gives Plain.
  static ChatTemplate detect(std::string_view template_text, std::string bos_text = {});
  // From the file's `tokenizer.chat_template`; without one, ChatML when the
  // vocabulary has <|im_start|>, else Plain.
  static ChatTemplate from_gguf(const GgufFile& file, const Tokenizer& tokenizer);

  // The prompt. Throws ChatTemplateError for a role other than system, user,
  // assistant or tool.
  //
  // Tools are written Hermes-style, as Qwen2.5's template writes them: their
  // definitions inside <tools></tools> in the system turn, an assistant's calls
  // as <tool_call>{"name": ..., "arguments": {...}}</tool_call>, and tool results
  // as <tool_response> blocks in a user turn. A template without a tools section
  // (SmolLM2's) gets the same layout, so every model sees one documented format.
  ChatPrompt render(std::span<const ChatMessage> messages, bool add_generation_prompt,
                    const ChatOptions& options = {}) const;
  std::string apply(std::span<const ChatMessage> messages, bool add_generation_prompt,
                    const ChatOptions& options = {}) const {
    return render(messages, add_generation_prompt, options).text;
  }
  // The prompt's token ids: the template's control tokens become their ids, the
  // messages' content is tokenized as plain text. `add_special`: BOS/EOS where
  // the tokenizer asks for them (the template may already write BOS).
  std::vector<int32_t> encode(const Tokenizer& tokenizer, std::span<const ChatMessage> messages,
                              bool add_generation_prompt, bool add_special = false,
                              const ChatOptions& options = {}) const;

  Family family() const { return family_; }
  const std::string& default_system() const { return default_system_; }
  // The template has a tools section (writes <tool_call>): tool results are
  // <tool_response> blocks even in a request without tools.
  bool has_tool_section() const { return tool_section_; }
  // The template reads enable_thinking (Qwen3): off writes an empty think block.
  bool has_thinking_switch() const { return thinking_switch_; }
  // The name of the tool-call format this template's model writes (vLLM's
  // --tool-call-parser name), from what the template's text spells: "mistral"
  // ([TOOL_CALLS]), "llama3_json" (<|python_tag|>, or Llama 3.1's JSON
  // function-call instructions), "deepseek_v32" (DSML, ｜DSML｜ with
  // function_calls), "deepseek_v4" (DSML otherwise: <｜DSML｜tool_calls>), else
  // "hermes". render()
  // describes tools in the hermes layout whichever it is.
  std::string_view tool_call_format() const { return tool_format_; }
  // The reasoning format (vLLM's --reasoning-parser name) the template's model
  // writes where it is known from the template alone: "deepseek_v4" for
  // DeepSeek-V4's (DSML tool calls and <think>); else empty.
  std::string_view reasoning_format() const { return reasoning_format_; }

 private:
  Family family_;
  std::string default_system_;
  std::string bos_text_;
  bool tool_section_ = false;
  bool thinking_switch_ = false;
  std::string_view tool_format_ = "hermes";
  std::string_view reasoning_format_;
};

std::string_view to_string(ChatTemplate::Family family);

}  // namespace inferd::engine
