// Chat templates without a Jinja engine: the model's `tokenizer.chat_template`
// text only selects a family, and each family is rendered here exactly as its
// template renders it. The result carries the template's special tokens as
// text; encode() parses them there and only there, so a message that contains
// "<|im_end|>" is that text, never the control token.
#pragma once
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer.hpp"

namespace inferd::engine {

class GgufFile;

struct ChatMessage {
  std::string role;  // system, user, assistant or tool
  std::string content;
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
  ChatPrompt render(std::span<const ChatMessage> messages, bool add_generation_prompt) const;
  std::string apply(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
    return render(messages, add_generation_prompt).text;
  }
  // The prompt's token ids: the template's control tokens become their ids, the
  // messages' content is tokenized as plain text. `add_special`: BOS/EOS where
  // the tokenizer asks for them (the template may already write BOS).
  std::vector<int32_t> encode(const Tokenizer& tokenizer, std::span<const ChatMessage> messages,
                              bool add_generation_prompt, bool add_special = false) const;

  Family family() const { return family_; }
  const std::string& default_system() const { return default_system_; }

 private:
  Family family_;
  std::string default_system_;
  std::string bos_text_;
};

std::string_view to_string(ChatTemplate::Family family);

}  // namespace inferd::engine
