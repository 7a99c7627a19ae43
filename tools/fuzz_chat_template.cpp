// libFuzzer target for chat templates. The first byte picks the template
// (bits 0-1: 0 the built-in ChatML template, 1 or 2 the plain one, 3 the first
// NUL-separated field of the rest as template text) and bit 2 add_generation_prompt; the
// remaining NUL-separated fields are role, content, role, content, ...
// Parsing and rendering must succeed or throw ChatTemplateError, and a prompt
// from a built-in template marks exactly each message's content as the
// request's text.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <typeinfo>
#include <vector>

#include "engine/chat_template.hpp"

using inferd::engine::ChatMessage;
using inferd::engine::ChatPrompt;
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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  auto fields = split(std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1));
  const bool builtin = (data[0] & 3) != 3;
  std::string_view source = (data[0] & 3) == 0 ? ChatTemplate::chatml_source() : ChatTemplate::plain_source();
  if (!builtin) {
    source = fields.front();
    fields.erase(fields.begin());
  }
  std::vector<ChatMessage> messages;
  for (size_t i = 0; i + 1 < fields.size(); i += 2) messages.push_back({std::string(fields[i]), std::string(fields[i + 1])});
  ChatPrompt prompt;
  try {
    const ChatTemplate tmpl(source, "fuzz", "<s>", "</s>");
    prompt = tmpl.render(messages, (data[0] & 4) != 0, {.now = 0});
  } catch (const ChatTemplateError& e) {
    if (builtin && std::string_view(e.what()).find("messages[") != 0) fail("ChatTemplateError not naming the message");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_chat_template: unexpected %s: %s\n", typeid(e).name(), e.what());
    std::abort();
  }
  for (const auto& r : prompt.content)
    if (r.begin >= r.end || r.end > prompt.text.size()) fail("a content range outside the prompt");
  if (!builtin) return 0;
  // Each non-empty content is one range: the templates write text between them.
  size_t range = 0;
  for (const ChatMessage& m : messages) {
    if (m.content.empty()) continue;
    if (range >= prompt.content.size()) fail("a message's content is not marked as the request's text");
    const auto& r = prompt.content[range++];
    if (prompt.text.compare(r.begin, r.end - r.begin, m.content) != 0) fail("a content range is not its message");
  }
  if (range != prompt.content.size()) fail("a range marks text that is no message's");
  return 0;
}
