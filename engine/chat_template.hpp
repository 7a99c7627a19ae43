// Chat templates: the model's own `tokenizer.chat_template`, rendered by
// engine/jinja with the variables transformers gives it (messages, tools,
// add_generation_prompt, bos_token, eos_token, enable_thinking). The result
// carries the template's special tokens as text, and knows which of its bytes
// are the request's (message content, tool definitions, tool calls): encode()
// parses control tokens everywhere else, so a message that contains
// "<|im_end|>" is that text, never the control token.
#pragma once
#include <cstdint>
#include <ctime>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer.hpp"

namespace inferd::engine {

class GgufFile;
namespace jinja {
class Template;
}

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
  std::string reasoning_content = {};          // assistant: an earlier turn's reasoning; empty: none
};

// What a request adds to its messages.
struct ChatOptions {
  // Each tool's definition as JSON text ({"type":"function","function":{...}}).
  // Empty: no tools (the template sees tools = none).
  std::vector<std::string> tools;
  // chat_template_kwargs.enable_thinking (or `thinking`, DeepSeek's name for
  // it), for templates that read it (Qwen3); unset: not defined for the
  // template (its default).
  std::optional<bool> enable_thinking;
  // The request's reasoning_effort (none, minimal, low, medium, high, max), for
  // templates that read it (DeepSeek-V4's); unset: not defined for the template.
  std::optional<std::string> reasoning_effort;
  // The time strftime_now() formats; unset: now.
  std::optional<std::time_t> now = {};
};

// A rendered prompt: its text and where the request's text lies in it.
struct ChatPrompt {
  std::string text;
  std::vector<TextRange> content;  // plain text: control tokens there are not parsed
};

// A template this engine cannot use (at load: names the origin, the line and
// the construct), or messages it cannot render (names the message index, or
// the template line that refused them, as raise_exception does).
struct ChatTemplateError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

class ChatTemplate {
 public:
  // `origin` names the template in errors ("model.gguf: tokenizer.chat_template").
  // `bos_text`, `eos_text`: the tokens' text, as bos_token and eos_token.
  ChatTemplate(std::string_view source, std::string_view origin, std::string bos_text = {}, std::string eos_text = {});

  // From the file's `tokenizer.chat_template`; without one, DeepSeek-V4's
  // encoding (deepseek_v4_template.hpp) when the vocabulary has <｜User｜> and
  // <｜Assistant｜>, ChatML when it has <|im_start|>, else "role: content" lines.
  static ChatTemplate from_gguf(const GgufFile& file, const Tokenizer& tokenizer);
  // From a Jinja file the operator gives instead of the model's own (vLLM's and
  // llama.cpp's --chat-template); throws ChatTemplateError naming the file when
  // it cannot be read, or its line and construct when it cannot be used.
  static ChatTemplate from_file(const std::string& path, const Tokenizer& tokenizer);
  // The templates used when a model has none.
  static std::string_view chatml_source();
  static std::string_view plain_source();

  // The prompt. Throws ChatTemplateError for a role other than system, user,
  // assistant or tool, or where the template refuses the messages.
  //
  // A template that reads `tools` lays tools, calls and results out itself
  // (calls' arguments reach it as objects). One that does not gets them
  // Hermes-style, as Qwen2.5's template writes them: the definitions inside
  // <tools></tools> in the system message (after the template's own default
  // system message, if it has one), an assistant's calls as
  // <tool_call>{"name": ..., "arguments": {...}}</tool_call> in its content,
  // and, in a request with tools, tool results as <tool_response> blocks in a
  // user message. So every model sees a documented format.
  ChatPrompt render(std::span<const ChatMessage> messages, bool add_generation_prompt,
                    const ChatOptions& options = {}) const;
  std::string apply(std::span<const ChatMessage> messages, bool add_generation_prompt,
                    const ChatOptions& options = {}) const {
    return render(messages, add_generation_prompt, options).text;
  }
  // The prompt's token ids: the template's control tokens become their ids, the
  // request's text is tokenized as plain text. `add_special`: BOS/EOS where
  // the tokenizer asks for them (the template may already write BOS).
  std::vector<int32_t> encode(const Tokenizer& tokenizer, std::span<const ChatMessage> messages,
                              bool add_generation_prompt, bool add_special = false,
                              const ChatOptions& options = {}) const;

  // The template lays tools out itself.
  bool reads_tools() const { return reads_tools_; }
  // A system message the template writes when the first message is not one
  // (SmolLM2's "You are a helpful AI assistant named SmolLM, ..."): the Hermes
  // tools section follows it.
  const std::string& default_system() const { return default_system_; }
  // The name of the tool-call format this template's model writes (vLLM's
  // --tool-call-parser name), from what the template's text spells: "mistral"
  // ([TOOL_CALLS]), "llama3_json" (<|python_tag|>, or Llama 3.1's JSON
  // function-call instructions), "deepseek_v32" (DSML, ｜DSML｜ with
  // function_calls), "deepseek_v4" (DSML otherwise: <｜DSML｜tool_calls>), else
  // "hermes".
  std::string_view tool_call_format() const { return tool_format_; }
  // The reasoning format (vLLM's --reasoning-parser name) the template's model
  // writes where it is known from the template alone: "deepseek_v4" for
  // DeepSeek-V4's (DSML tool calls and <think>); else empty.
  std::string_view reasoning_format() const { return reasoning_format_; }

 private:
  std::shared_ptr<const jinja::Template> template_;  // immutable: copies share it
  std::string bos_text_, eos_text_;
  std::string default_system_;
  bool reads_tools_ = false;
  std::string_view tool_format_ = "hermes";
  std::string_view reasoning_format_;
};

}  // namespace inferd::engine
