#include "engine/chat_template.hpp"

#include <array>

#include "engine/gguf_reader.hpp"
#include "engine/tokenizer.hpp"

namespace inferd::engine {
namespace {

constexpr std::array<std::string_view, 4> kRoles = {"system", "user", "assistant", "tool"};

void check_roles(std::span<const ChatMessage> messages) {
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    bool known = false;
    for (std::string_view r : kRoles) known = known || role == r;
    if (!known)
      throw ChatTemplateError("messages[" + std::to_string(i) + "]: role '" + role +
                              "' is not one of system, user, assistant, tool");
  }
}

// Jinja's `trim`: strips leading and trailing whitespace.
std::string_view trim(std::string_view s) {
  constexpr std::string_view ws = " \t\n\r\f\v";
  size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

// A ChatML template that supplies its own system message writes it as one
// literal, '<|im_start|>system\n...<|im_end|>'; other occurrences of
// "<|im_start|>system" are followed by Jinja expressions, recognisable by
// quotes or braces before the <|im_end|>.
std::string chatml_default_system(std::string_view tmpl) {
  constexpr std::string_view open = "<|im_start|>system", close = "<|im_end|>";
  for (size_t at = tmpl.find(open); at != std::string_view::npos; at = tmpl.find(open, at + 1)) {
    std::string_view rest = tmpl.substr(at + open.size());
    if (rest.starts_with("\n")) rest.remove_prefix(1);
    else if (rest.starts_with("\\n")) rest.remove_prefix(2);  // escaped inside the Jinja literal
    else continue;
    size_t end = rest.find(close);
    if (end == std::string_view::npos || end == 0) continue;
    std::string_view text = rest.substr(0, end);
    if (text.find_first_of("'\"{}") != std::string_view::npos) continue;
    std::string out;
    for (size_t i = 0; i < text.size(); ++i) {
      if (text[i] == '\\' && i + 1 < text.size() && text[i + 1] == 'n') {
        out += '\n';
        ++i;
      } else {
        out += text[i];
      }
    }
    return out;
  }
  return {};
}

}  // namespace

ChatTemplate::ChatTemplate(Family family, std::string default_system, std::string bos_text)
    : family_(family), default_system_(std::move(default_system)), bos_text_(std::move(bos_text)) {}

ChatTemplate ChatTemplate::detect(std::string_view template_text, std::string bos_text) {
  if (template_text.find("<|im_start|>") != std::string_view::npos)
    return ChatTemplate(Family::ChatML, chatml_default_system(template_text), std::move(bos_text));
  if (template_text.find("<|start_header_id|>") != std::string_view::npos)
    return ChatTemplate(Family::Llama3, {}, std::move(bos_text));
  return ChatTemplate(Family::Plain, {}, std::move(bos_text));
}

ChatTemplate ChatTemplate::from_gguf(const GgufFile& file, const Tokenizer& tokenizer) {
  std::string bos = tokenizer.bos() >= 0 ? tokenizer.token_text(tokenizer.bos()) : std::string();
  if (auto text = file.get_string("tokenizer.chat_template")) return detect(*text, std::move(bos));
  if (tokenizer.find("<|im_start|>")) return ChatTemplate(Family::ChatML, {}, std::move(bos));
  return ChatTemplate(Family::Plain, {}, std::move(bos));
}

ChatPrompt ChatTemplate::render(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
  check_roles(messages);
  ChatPrompt p;
  std::string& out = p.text;
  auto content = [&](std::string_view text) {
    p.content.push_back({out.size(), out.size() + text.size()});
    out += text;
  };
  switch (family_) {
    case Family::ChatML:
      if (!messages.empty() && messages[0].role != "system" && !default_system_.empty())
        out += "<|im_start|>system\n" + default_system_ + "<|im_end|>\n";
      for (const ChatMessage& m : messages) {
        out += "<|im_start|>" + m.role + "\n";
        content(m.content);
        out += "<|im_end|>\n";
      }
      if (add_generation_prompt) out += "<|im_start|>assistant\n";
      break;
    case Family::Llama3:
      if (!messages.empty()) out += bos_text_;
      for (const ChatMessage& m : messages) {
        out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n";
        content(trim(m.content));
        out += "<|eot_id|>";
      }
      if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      break;
    case Family::Plain:
      for (const ChatMessage& m : messages) {
        out += m.role + ": ";
        content(m.content);
        out += "\n";
      }
      if (add_generation_prompt) out += "assistant:";
      break;
  }
  return p;
}

std::vector<int32_t> ChatTemplate::encode(const Tokenizer& tokenizer, std::span<const ChatMessage> messages,
                                          bool add_generation_prompt, bool add_special) const {
  const ChatPrompt p = render(messages, add_generation_prompt);
  return tokenizer.encode(p.text, add_special, p.content);
}

std::string_view to_string(ChatTemplate::Family family) {
  switch (family) {
    case ChatTemplate::Family::ChatML: return "chatml";
    case ChatTemplate::Family::Llama3: return "llama3";
    case ChatTemplate::Family::Plain: return "plain";
  }
  return "unknown";
}

}  // namespace inferd::engine
