#include "engine/chat_template.hpp"

#include <array>
#include <utility>

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
  Family family = Family::Plain;
  std::string system;
  if (template_text.find("<|im_start|>") != std::string_view::npos) {
    family = Family::ChatML;
    system = chatml_default_system(template_text);
  } else if (template_text.find("<|start_header_id|>") != std::string_view::npos) {
    family = Family::Llama3;
  }
  ChatTemplate t(family, std::move(system), std::move(bos_text));
  t.tool_section_ = template_text.find("<tool_call>") != std::string_view::npos;
  t.thinking_switch_ = template_text.find("enable_thinking") != std::string_view::npos;
  auto has = [&](std::string_view s) { return template_text.find(s) != std::string_view::npos; };
  if (has("[TOOL_CALLS]"))
    t.tool_format_ = "mistral";
  else if (has("｜DSML｜"))  // templates spell it apart from the block's name: '<' + dsml_token + 'tool_calls>'
    t.tool_format_ = has("function_calls") ? "deepseek_v32" : "deepseek_v4";
  else if (!t.tool_section_ && (has("<|python_tag|>") || has("respond with a JSON for a function call")))
    t.tool_format_ = "llama3_json";
  if (t.tool_format_ == "deepseek_v4" && has("<think>")) t.reasoning_format_ = "deepseek_v4";
  return t;
}

ChatTemplate ChatTemplate::from_gguf(const GgufFile& file, const Tokenizer& tokenizer) {
  std::string bos = tokenizer.bos() >= 0 ? tokenizer.token_text(tokenizer.bos()) : std::string();
  if (auto text = file.get_string("tokenizer.chat_template")) return detect(*text, std::move(bos));
  if (tokenizer.find("<|im_start|>")) return ChatTemplate(Family::ChatML, {}, std::move(bos));
  return ChatTemplate(Family::Plain, {}, std::move(bos));
}

namespace {

// Qwen2.5's tools section, word for word.
constexpr std::string_view kToolsIntro =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
constexpr std::string_view kToolsOutro =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call>";

// One turn's body as pieces: the template's own text, and content (the client's
// text, where control tokens are never parsed).
struct Turn {
  explicit Turn(std::string r) : role(std::move(r)) {}
  std::string role;
  std::vector<std::pair<std::string, bool>> pieces;  // text, is content
  bool trim = false;  // Llama 3 trims plain message content
  void lit(std::string_view t) { pieces.emplace_back(std::string(t), false); }
  void text(std::string_view t) { pieces.emplace_back(std::string(t), true); }
};

}  // namespace

ChatPrompt ChatTemplate::render(std::span<const ChatMessage> messages, bool add_generation_prompt,
                                const ChatOptions& options) const {
  check_roles(messages);
  const bool tools = !options.tools.empty();
  const bool hermes = tools || tool_section_;

  // Messages as turns, the tools section and tool results in Hermes layout.
  std::vector<Turn> turns;
  size_t first = 0;
  if (tools) {
    Turn sys{"system"};
    if (!messages.empty() && messages[0].role == "system") {
      sys.text(messages[0].content);
      first = 1;
    } else if (!default_system_.empty()) {
      sys.lit(default_system_);
    }
    if (!sys.pieces.empty()) sys.lit("\n\n");
    sys.lit(kToolsIntro);
    for (const std::string& t : options.tools) {
      sys.lit("\n");
      sys.text(t);
    }
    sys.lit(kToolsOutro);
    turns.push_back(std::move(sys));
  } else if (family_ == Family::ChatML && !messages.empty() && messages[0].role != "system" &&
             !default_system_.empty()) {
    Turn sys{"system"};
    sys.lit(default_system_);
    turns.push_back(std::move(sys));
  }
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "tool" && hermes) {
      // Consecutive results share one user turn.
      if (i == first || messages[i - 1].role != "tool") turns.emplace_back("user");
      Turn& t = turns.back();
      t.lit(t.pieces.empty() ? "<tool_response>\n" : "\n<tool_response>\n");
      t.text(m.content);
      t.lit("\n</tool_response>");
      continue;
    }
    Turn t{m.role};
    if (m.tool_calls.empty()) {
      t.text(m.content);
      t.trim = true;
    } else {
      if (!m.content.empty()) t.text(m.content);
      for (const ChatToolCall& c : m.tool_calls) {
        t.lit(t.pieces.empty() ? "<tool_call>\n{\"name\": \"" : "\n<tool_call>\n{\"name\": \"");
        t.text(c.name);
        t.lit("\", \"arguments\": ");
        t.text(c.arguments);
        t.lit("}\n</tool_call>");
      }
    }
    turns.push_back(std::move(t));
  }

  ChatPrompt p;
  std::string& out = p.text;
  auto body = [&](const Turn& t) {
    for (const auto& [text, is_content] : t.pieces) {
      std::string_view v = text;
      if (is_content && t.trim && family_ == Family::Llama3) v = trim(v);
      if (is_content) p.content.push_back({out.size(), out.size() + v.size()});
      out += v;
    }
  };
  switch (family_) {
    case Family::ChatML:
      for (const Turn& t : turns) {
        out += "<|im_start|>" + t.role + "\n";
        body(t);
        out += "<|im_end|>\n";
      }
      if (add_generation_prompt) {
        out += "<|im_start|>assistant\n";
        // Qwen3 with thinking off: an empty think block the model continues after.
        if (thinking_switch_ && options.enable_thinking == false) out += "<think>\n\n</think>\n\n";
      }
      break;
    case Family::Llama3:
      if (!turns.empty()) out += bos_text_;
      for (const Turn& t : turns) {
        out += "<|start_header_id|>" + t.role + "<|end_header_id|>\n\n";
        body(t);
        out += "<|eot_id|>";
      }
      if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      break;
    case Family::Plain:
      for (const Turn& t : turns) {
        out += t.role + ": ";
        body(t);
        out += "\n";
      }
      if (add_generation_prompt) out += "assistant:";
      break;
  }
  return p;
}

std::vector<int32_t> ChatTemplate::encode(const Tokenizer& tokenizer, std::span<const ChatMessage> messages,
                                          bool add_generation_prompt, bool add_special,
                                          const ChatOptions& options) const {
  const ChatPrompt p = render(messages, add_generation_prompt, options);
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
