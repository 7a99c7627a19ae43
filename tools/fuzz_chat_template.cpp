// libFuzzer target for the chat template renderer. The first byte picks the
// template (bits 0-1: ChatML with SmolLM2's default system message, Llama 3,
// Plain, or the family detect() finds in the first NUL-separated field of the
// rest) and bit 2 add_generation_prompt; the remaining NUL-separated fields are
// role, content, role, content, ... Rendering must succeed or throw
// ChatTemplateError, and a rendered prompt holds every message's content in order.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <typeinfo>
#include <vector>

#include "engine/chat_template.hpp"

using inferd::engine::ChatMessage;
using inferd::engine::ChatTemplate;
using inferd::engine::ChatTemplateError;

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_chat_template: %s\n", what);
  std::abort();
}

std::vector<std::string_view> split(std::string_view s) {
  std::vector<std::string_view> out;
  for (size_t at = 0;;) {
    const size_t end = s.find('\0', at);
    out.push_back(s.substr(at, end == std::string_view::npos ? std::string_view::npos : end - at));
    if (end == std::string_view::npos) return out;
    at = end + 1;
  }
}

ChatTemplate pick(uint8_t selector, std::vector<std::string_view>& fields) {
  switch (selector & 3) {
    case 0: return ChatTemplate(ChatTemplate::Family::ChatML, "You are a helpful AI assistant named SmolLM");
    case 1: return ChatTemplate(ChatTemplate::Family::Llama3, {}, "<|begin_of_text|>");
    case 2: return ChatTemplate(ChatTemplate::Family::Plain);
  }
  const std::string_view text = fields.empty() ? std::string_view() : fields.front();
  if (!fields.empty()) fields.erase(fields.begin());
  return ChatTemplate::detect(text, "<s>");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  auto fields = split(std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1));
  const ChatTemplate tmpl = pick(data[0], fields);
  std::vector<ChatMessage> messages;
  for (size_t i = 0; i + 1 < fields.size(); i += 2) messages.push_back({std::string(fields[i]), std::string(fields[i + 1])});
  std::string prompt;
  try {
    prompt = tmpl.apply(messages, (data[0] & 4) != 0);
  } catch (const ChatTemplateError& e) {
    if (std::string_view(e.what()).find("messages[") != 0) fail("ChatTemplateError not naming the message");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_chat_template: unexpected %s: %s\n", typeid(e).name(), e.what());
    std::abort();
  }
  // Llama 3 trims each content as its template does; the others keep it whole.
  constexpr std::string_view ws = " \t\n\r\f\v";
  size_t at = 0;
  for (const ChatMessage& m : messages) {
    std::string_view content = m.content;
    if (tmpl.family() == ChatTemplate::Family::Llama3) {
      content.remove_prefix(std::min(content.size(), content.find_first_not_of(ws)));
      content.remove_suffix(content.size() - std::min(content.size(), content.find_last_not_of(ws) + 1));
    }
    const size_t found = prompt.find(content, at);
    if (found == std::string::npos) fail("a message's content is missing from the prompt");
    at = found + content.size();
  }
  return 0;
}
