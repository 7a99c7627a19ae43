#include "engine/chat_template.hpp"

#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "engine/deepseek_v4_template.hpp"
#include "engine/gguf_reader.hpp"
#include "engine/jinja/evaluator.hpp"
#include "engine/jinja/lexer.hpp"
#include "engine/tokenizer.hpp"

namespace inferd::engine {
namespace {

using jinja::Dict;
using jinja::List;
using jinja::Text;
using jinja::Value;

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

// Qwen2.5's tools section, word for word.
constexpr std::string_view kToolsIntro =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
constexpr std::string_view kToolsOutro =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call>";

// Models without a template: ChatML, or one "role: content" line per message.
constexpr std::string_view kChatML =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
constexpr std::string_view kPlain =
    "{% for message in messages %}{{ message['role'] + ': ' + message['content'] + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ 'assistant:' }}{% endif %}";

// JSON text from the request as a value; text that is not JSON stays a string.
Value request_json(const std::string& text) {
  try {
    return jinja::from_json_request(text);
  } catch (const std::invalid_argument&) {
    return Text::request(text);
  }
}

Value message(std::string_view role, Text content) {
  return Dict{{"role", std::string(role)}, {"content", std::move(content)}};
}

// A message as transformers passes an OpenAI message: tool calls as
// {"type": "function", "function": {"name", "arguments"}} with the arguments
// an object, as vLLM and llama.cpp's server give them.
Value native_message(const ChatMessage& m) {
  Value v = message(m.role, Text::request(m.content));
  if (!m.tool_calls.empty()) {
    List calls;
    for (const ChatToolCall& c : m.tool_calls)
      calls.push_back(Dict{{"type", "function"},
                           {"function", Dict{{"name", Text::request(c.name)}, {"arguments", request_json(c.arguments)}}}});
    v.dict().emplace_back("tool_calls", std::move(calls));
  }
  if (!m.tool_call_id.empty()) v.dict().emplace_back("tool_call_id", Text::request(m.tool_call_id));
  if (!m.reasoning_content.empty()) v.dict().emplace_back("reasoning_content", Text::request(m.reasoning_content));
  return v;
}

// The Hermes layout for a template that does not read `tools`.
List hermes_messages(std::span<const ChatMessage> messages, const ChatOptions& options,
                     const std::string& default_system) {
  List out;
  size_t first = 0;
  const bool tools = !options.tools.empty();
  if (tools) {
    Text sys;
    if (!messages.empty() && messages[0].role == "system") {
      sys = Text::request(messages[0].content);
      first = 1;
    } else {
      sys = Text(default_system);
    }
    if (!sys.str.empty()) sys.append("\n\n");
    sys.append(kToolsIntro);
    for (const std::string& t : options.tools) {
      sys.append("\n");
      sys.append(Text::request(t));
    }
    sys.append(kToolsOutro);
    out.push_back(message("system", std::move(sys)));
  }
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "tool" && tools) {
      // Consecutive results share one user message.
      Text body;
      if (i != first && messages[i - 1].role == "tool") {
        body = out.back().get("content").text();
        body.append("\n");
        out.pop_back();
      }
      body.append("<tool_response>\n");
      body.append(Text::request(m.content));
      body.append("\n</tool_response>");
      out.push_back(message("user", std::move(body)));
      continue;
    }
    Text content = Text::request(m.content);
    for (const ChatToolCall& c : m.tool_calls) {
      content.append(content.str.empty() ? "<tool_call>\n{\"name\": \"" : "\n<tool_call>\n{\"name\": \"");
      content.append(Text::request(c.name));
      content.append("\", \"arguments\": ");
      content.append(Text::request(c.arguments));
      content.append("}\n</tool_call>");
    }
    out.push_back(message(m.role, std::move(content)));
  }
  return out;
}

}  // namespace

ChatTemplate::ChatTemplate(std::string_view source, std::string_view origin, std::string bos_text,
                           std::string eos_text)
    : bos_text_(std::move(bos_text)), eos_text_(std::move(eos_text)) {
  try {
    template_ = std::make_shared<const jinja::Template>(source);
  } catch (const jinja::SyntaxError& e) {
    throw ChatTemplateError(std::string(origin) + " " + e.what());
  }
  reads_tools_ = template_->reads("tools");
  default_system_ = chatml_default_system(source);
  auto has = [&](std::string_view s) { return source.find(s) != std::string_view::npos; };
  if (has("[TOOL_CALLS]"))
    tool_format_ = "mistral";
  else if (has("｜DSML｜"))  // templates spell it apart from the block's name: '<' + dsml_token + 'tool_calls>'
    tool_format_ = has("function_calls") ? "deepseek_v32" : "deepseek_v4";
  else if (!has("<tool_call>") && (has("<|python_tag|>") || has("respond with a JSON for a function call")))
    tool_format_ = "llama3_json";
  if (tool_format_ == "deepseek_v4" && has("<think>")) reasoning_format_ = "deepseek_v4";
}

std::string_view ChatTemplate::chatml_source() { return kChatML; }
std::string_view ChatTemplate::plain_source() { return kPlain; }

namespace {
// The text of the tokenizer's bos and eos tokens (bos_token, eos_token in templates).
std::pair<std::string, std::string> bos_eos_text(const Tokenizer& tokenizer) {
  auto text_of = [&](int32_t id) { return id >= 0 ? tokenizer.token_text(id) : std::string(); };
  return {text_of(tokenizer.bos()), text_of(tokenizer.eos())};
}
}  // namespace

ChatTemplate ChatTemplate::from_file(const std::string& path, const Tokenizer& tokenizer) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  if (!(in && text << in.rdbuf()))
    throw ChatTemplateError(path + ": cannot read the chat template: " + std::strerror(errno));
  auto [bos, eos] = bos_eos_text(tokenizer);
  return ChatTemplate(text.str(), path, std::move(bos), std::move(eos));
}

ChatTemplate ChatTemplate::from_gguf(const GgufFile& file, const Tokenizer& tokenizer) {
  auto [bos, eos] = bos_eos_text(tokenizer);
  if (auto text = file.get_string("tokenizer.chat_template"))
    return ChatTemplate(*text, file.path() + ": tokenizer.chat_template", std::move(bos), std::move(eos));
  // DeepSeek-V4 ships no template: its turn tokens select its encoding.
  if (tokenizer.find("<｜User｜>") && tokenizer.find("<｜Assistant｜>"))
    return ChatTemplate(deepseek_v4_chat_template(), "built-in DeepSeek-V4 template", std::move(bos), std::move(eos));
  const bool chatml = tokenizer.find("<|im_start|>").has_value();
  return ChatTemplate(chatml ? kChatML : kPlain, chatml ? "built-in ChatML template" : "built-in plain template",
                      std::move(bos), std::move(eos));
}

ChatPrompt ChatTemplate::render(std::span<const ChatMessage> messages, bool add_generation_prompt,
                                const ChatOptions& options) const {
  check_roles(messages);
  List msgs;
  if (reads_tools_) {
    for (const ChatMessage& m : messages) msgs.push_back(native_message(m));
  } else {
    msgs = hermes_messages(messages, options, default_system_);
  }
  Value tools = jinja::None{};
  if (reads_tools_ && !options.tools.empty()) {
    List defs;
    for (const std::string& t : options.tools) defs.push_back(request_json(t));
    tools = std::move(defs);
  }
  Dict context{{"messages", std::move(msgs)},
               {"tools", std::move(tools)},
               {"documents", jinja::None{}},
               {"add_generation_prompt", add_generation_prompt},
               {"bos_token", bos_text_},
               {"eos_token", eos_text_}};
  if (options.enable_thinking) {  // under both names: Qwen3's templates read one, DeepSeek's the other
    context.emplace_back("enable_thinking", *options.enable_thinking);
    context.emplace_back("thinking", *options.enable_thinking);
  }
  if (options.reasoning_effort) context.emplace_back("reasoning_effort", *options.reasoning_effort);
  Text out;
  try {
    out = template_->render(context, options.now.value_or(std::time(nullptr)));
  } catch (const jinja::RenderError& e) {
    throw ChatTemplateError(std::string("chat template ") + e.what());
  }
  ChatPrompt p;
  p.text = std::move(out.str);
  for (const jinja::Range& r : out.marks) p.content.push_back({r.begin, r.end});
  return p;
}

std::vector<int32_t> ChatTemplate::encode(const Tokenizer& tokenizer, std::span<const ChatMessage> messages,
                                          bool add_generation_prompt, bool add_special,
                                          const ChatOptions& options) const {
  const ChatPrompt p = render(messages, add_generation_prompt, options);
  return tokenizer.encode(p.text, add_special, p.content);
}

}  // namespace inferd::engine
