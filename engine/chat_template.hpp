// Chat templates without a Jinja engine: the model's `tokenizer.chat_template`
// text only selects a family, and each family is rendered here exactly as its
// template renders it. The result carries its special tokens as text; encode it
// with add_special = false and parse_special = true.
#pragma once
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

namespace inferd::engine {

class GgufFile;
class Tokenizer;

struct ChatMessage {
  std::string role;  // system, user, assistant or tool
  std::string content;
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

  // The prompt text. Throws ChatTemplateError for a role other than system,
  // user, assistant or tool.
  std::string apply(std::span<const ChatMessage> messages, bool add_generation_prompt) const;

  Family family() const { return family_; }
  const std::string& default_system() const { return default_system_; }

 private:
  Family family_;
  std::string default_system_;
  std::string bos_text_;
};

std::string_view to_string(ChatTemplate::Family family);

}  // namespace inferd::engine
