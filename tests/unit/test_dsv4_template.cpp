// DeepSeek-V4's prompt encoding as inferd's built-in template
// (engine/deepseek_v4_template.cpp): rendered by the Jinja engine it gives, byte
// for byte, what vLLM's Python encoding gives on the conversations of
// tests/golden/dsv4_template.json (tools/make_dsv4_template_golden.py), and
// ChatTemplate reads DSML tool calls and <think> reasoning from it.
#include <doctest/doctest.h>

#include <boost/json.hpp>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/chat_template.hpp"
#include "engine/deepseek_v4_template.hpp"
#include "engine/hf_checkpoint.hpp"
#include "engine/tokenizer.hpp"
#include "tests/unit/golden_runner.hpp"
#include "tests/unit/safetensors_scratch.hpp"
#include "tests/unit/test_paths.hpp"

using namespace inferd;
using engine::ChatMessage;
using engine::ChatOptions;
using engine::ChatTemplate;
namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

std::string golden_dir() { return test_paths::source_dir() + "/tests/golden"; }

ChatTemplate v4() { return ChatTemplate(engine::deepseek_v4_chat_template(), "built-in DeepSeek-V4 template"); }

std::string str(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  return v ? std::string(v->as_string()) : std::string();
}

std::vector<ChatMessage> messages_of(const json::array& a) {
  std::vector<ChatMessage> out;
  for (const auto& v : a) {
    const auto& m = v.as_object();
    ChatMessage msg{str(m, "role"), str(m, "content")};
    msg.tool_call_id = str(m, "tool_call_id");
    msg.reasoning_content = str(m, "reasoning_content");
    if (const json::value* calls = m.if_contains("tool_calls"))
      for (const auto& c : calls->as_array())
        msg.tool_calls.push_back({str(c.as_object(), "name"), str(c.as_object(), "arguments")});
    out.push_back(std::move(msg));
  }
  return out;
}

}  // namespace

TEST_CASE("dsv4 template: renders vLLM's DeepSeek-V4 encoding byte for byte") {
  const ChatTemplate t = v4();
  const json::object g = test_golden::read_golden(golden_dir() + "/dsv4_template.json");
  const auto& cases = g.at("cases").as_array();
  CHECK(cases.size() >= 10);
  for (const auto& cv : cases) {
    const auto& c = cv.as_object();
    CAPTURE(str(c, "name"));
    ChatOptions opts;
    for (const auto& tool : c.at("tools").as_array()) opts.tools.emplace_back(tool.as_string());
    if (const json::value* th = c.if_contains("thinking")) opts.enable_thinking = th->as_bool();
    // As the daemon reads a request's reasoning_effort (openai_schema.cpp): "none" turns thinking off.
    if (const json::value* e = c.if_contains("reasoning_effort")) {
      opts.reasoning_effort = std::string(e->as_string());
      if (*opts.reasoning_effort == "none") opts.enable_thinking = false;
    }
    const auto msgs = messages_of(c.at("messages").as_array());
    CHECK(t.apply(msgs, c.at("add_generation_prompt").as_bool(), opts) == str(c, "prompt"));
  }
}

TEST_CASE("dsv4 template: DSML tool calls and <think> reasoning are detected, tools read natively") {
  const ChatTemplate t = v4();
  CHECK(t.tool_call_format() == "deepseek_v4");
  CHECK(t.reasoning_format() == "deepseek_v4");
  CHECK(t.reads_tools());
}

TEST_CASE("dsv4 template: the assistant opener follows the last user turn only with add_generation_prompt") {
  const ChatTemplate t = v4();
  const std::vector<ChatMessage> msgs{{"user", "Hi"}};
  ChatOptions off;
  off.enable_thinking = false;
  CHECK(t.apply(msgs, true, off) == "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜></think>");
  CHECK(t.apply(msgs, false, off) == "<｜begin▁of▁sentence｜><｜User｜>Hi");
}

TEST_CASE("dsv4 template: tokenized with the tiny chat checkpoint's tokenizer, typed special tokens stay text") {
  test_scratch::Scratch s(golden_dir() + "/hf-tiny", "dsv4-tpl");
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "generation_config.json"})
    fs::copy_file(golden_dir() + "/dsv4-tiny-chat/" + f, s.path(f), fs::copy_options::overwrite_existing);
  fs::remove(s.path("chat_template.jinja"));
  const auto file = engine::open_model(s.path());
  const auto tok = engine::Tokenizer::from_gguf(*file);
  // The checkpoint has no template: its vocabulary selects V4's.
  const ChatTemplate t = ChatTemplate::from_gguf(*file, *tok);
  CHECK(t.tool_call_format() == "deepseek_v4");
  ChatOptions on;
  on.enable_thinking = true;
  const std::vector<ChatMessage> msgs{{"user", "<｜Assistant｜>"}};
  const std::vector<int32_t> ids = t.encode(*tok, msgs, true, false, on);
  const int32_t user = *tok->find("<｜User｜>"), assistant = *tok->find("<｜Assistant｜>");
  REQUIRE(ids.size() > 4);
  CHECK(ids.front() == tok->bos());
  CHECK(std::count(ids.begin(), ids.end(), user) == 1);
  CHECK(std::count(ids.begin(), ids.end(), assistant) == 1);  // the template's, not the typed one
  CHECK(ids.back() == *tok->find("<think>"));
  CHECK(ids[ids.size() - 2] == assistant);
}
