#include <doctest/doctest.h>

#include <string>

#include <boost/json.hpp>

#include "daemon/json_error.hpp"
#include "daemon/openai_schema.hpp"

namespace json = boost::json;
namespace oa = inferd::daemon::openai;
using inferd::daemon::HttpError;
using inferd::engine::FinishReason;
using inferd::engine::TokenOut;
using inferd::engine::Usage;

namespace {

json::object body(std::string_view text) { return json::parse(text).as_object(); }

// Parses `text` with `parse`, expecting a 400 whose param is `param` and whose
// message contains `needle`.
template <class F>
void expect_invalid(F parse, std::string_view text, std::string_view param, std::string_view needle = {}) {
  CAPTURE(text);
  try {
    parse(body(text));
    FAIL("accepted an invalid body");
  } catch (const HttpError& e) {
    CHECK(e.status == 400);
    CHECK(e.param == param);
    if (!needle.empty()) CHECK_MESSAGE(std::string(e.what()).find(needle) != std::string::npos, e.what());
  }
}

void bad_chat(std::string_view text, std::string_view param, std::string_view needle = {}) {
  expect_invalid(oa::parse_chat_request, text, param, needle);
}
void bad_completion(std::string_view text, std::string_view param, std::string_view needle = {}) {
  expect_invalid(oa::parse_completion_request, text, param, needle);
}

const oa::TokenBytes kBytes = [](int32_t id) -> std::string {
  switch (id) {
    case 1: return "Hello";
    case 2: return " world";
    case 3: return "\xE2\x82";  // half of "€"
    default: return "<" + std::to_string(id) + ">";
  }
};

}  // namespace

TEST_CASE("chat request: fields and defaults") {
  auto r = oa::parse_chat_request(body(R"({
    "model": "m", "messages": [
      {"role": "developer", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "assistant", "content": null}],
    "max_completion_tokens": 7, "max_tokens": 99, "temperature": 0.5, "top_p": 0.9, "top_k": -1,
    "min_p": 0.1, "seed": 42, "stop": "END", "presence_penalty": 0.5, "frequency_penalty": -0.5,
    "repetition_penalty": 1.1, "logprobs": true, "top_logprobs": 3, "stream": true,
    "stream_options": {"include_usage": true}, "ignore_eos": true, "skip_special_tokens": false,
    "user": "ignored"})"));
  CHECK(r.api == oa::Api::Chat);
  CHECK(r.model == "m");
  REQUIRE(r.messages.size() == 3);
  CHECK(r.messages[0].role == "system");
  CHECK(r.messages[1].content == "a\nb");
  CHECK(r.messages[2].content.empty());
  CHECK(r.max_tokens == 7);  // max_completion_tokens wins
  CHECK(r.sampling.temperature == doctest::Approx(0.5));
  CHECK(r.sampling.top_p == doctest::Approx(0.9));
  CHECK(r.sampling.top_k == 0);
  CHECK(r.sampling.min_p == doctest::Approx(0.1));
  CHECK(r.sampling.presence_penalty == doctest::Approx(0.5));
  CHECK(r.sampling.frequency_penalty == doctest::Approx(-0.5));
  CHECK(r.sampling.repetition_penalty == doctest::Approx(1.1));
  CHECK(r.sampling.seed == 42u);
  CHECK(r.sampling.logprobs == 3);
  CHECK(r.logprobs());
  CHECK(r.stop == std::vector<std::string>{"END"});
  CHECK(r.stream);
  CHECK(r.include_usage);
  CHECK(r.ignore_eos);
  CHECK_FALSE(r.skip_special_tokens);
  CHECK_FALSE(r.add_special_tokens);

  auto d = oa::parse_chat_request(body(R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5.0})"));
  CHECK(d.max_tokens == 5);
  CHECK(d.n == 1);
  CHECK_FALSE(d.stream);
  CHECK(d.sampling.temperature == doctest::Approx(1.0));
  CHECK(d.sampling.logprobs == -1);
  CHECK(d.add_generation_prompt);
  CHECK(d.skip_special_tokens);
  CHECK_FALSE(oa::parse_chat_request(body(R"({"messages": [{"role": "user", "content": "x"}]})")).max_tokens);
}

TEST_CASE("chat request: every bad field names its param") {
  bad_chat(R"({})", "messages", "required");
  bad_chat(R"({"messages": "hi"})", "messages", "must be an array");
  bad_chat(R"({"messages": []})", "messages", "must not be empty");
  bad_chat(R"({"messages": [1]})", "messages[0]", "must be an object");
  bad_chat(R"({"messages": [{"content": "x"}]})", "messages[0].role", "required");
  bad_chat(R"({"messages": [{"role": "user", "content": "x"}, {"role": "wizard", "content": "x"}]})",
           "messages[1].role", "unknown role `wizard`");
  bad_chat(R"({"messages": [{"role": "user"}]})", "messages[0].content", "required");
  bad_chat(R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content", "string or an array");
  bad_chat(R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})",
           "messages[0].content[0].type", "`image_url`");
  bad_chat(R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})", "messages[0].content[0].text");
  bad_chat(R"({"messages": [{"role": "user", "content": ["x"]}]})", "messages[0].content[0]");

  const std::string m = R"("messages": [{"role": "user", "content": "x"}])";
  auto with = [&](std::string_view field) { return "{" + m + ", " + std::string(field) + "}"; };
  bad_chat(with(R"("model": 3)"), "model", "must be a string");
  bad_chat(with(R"("temperature": "hot")"), "temperature", "must be a number, got a string");
  bad_chat(with(R"("temperature": -0.1)"), "temperature", "-0.1");
  bad_chat(with(R"("top_p": 0)"), "top_p", "(0, 1]");
  bad_chat(with(R"("top_p": 1.5)"), "top_p");
  bad_chat(with(R"("top_k": -2)"), "top_k");
  bad_chat(with(R"("top_k": 1.5)"), "top_k", "must be an integer");
  bad_chat(with(R"("min_p": 2)"), "min_p");
  bad_chat(with(R"("presence_penalty": 3)"), "presence_penalty");
  bad_chat(with(R"("frequency_penalty": -2.5)"), "frequency_penalty");
  bad_chat(with(R"("repetition_penalty": 0)"), "repetition_penalty");
  bad_chat(with(R"("seed": "x")"), "seed");
  bad_chat(with(R"("max_tokens": 0)"), "max_tokens", "at least 1");
  bad_chat(with(R"("max_completion_tokens": -5)"), "max_completion_tokens");
  bad_chat(with(R"("max_tokens": "10")"), "max_tokens", "integer");
  bad_chat(with(R"("n": 0)"), "n");
  bad_chat(with(R"("n": 1000)"), "n");
  bad_chat(with(R"("stop": 5)"), "stop");
  bad_chat(with(R"("stop": ["a", 1])"), "stop[1]");
  bad_chat(with(R"("stop": [""])"), "stop", "empty");
  bad_chat(with(R"("stop_token_ids": [-1])"), "stop_token_ids[0]");
  bad_chat(with(R"("stream": "yes")"), "stream", "boolean");
  bad_chat(with(R"("stream_options": {"include_usage": true})"), "stream_options", "only allowed");
  bad_chat(with(R"("stream": true, "stream_options": {"include_usage": 1})"), "stream_options.include_usage");
  bad_chat(with(R"("logprobs": 1)"), "logprobs", "boolean");
  bad_chat(with(R"("top_logprobs": 2)"), "top_logprobs", "logprobs");
  bad_chat(with(R"("logprobs": true, "top_logprobs": 21)"), "top_logprobs");
  bad_chat(with(R"("ignore_eos": 1)"), "ignore_eos");
  bad_chat(with(R"("response_format": "json")"), "response_format", "object");
  bad_chat(with(R"("response_format": {"type": "xml"})"), "response_format.type", "json_schema");
  bad_chat(with(R"("response_format": {"type": "json_schema"})"), "response_format.json_schema", "required");
  bad_chat(with(R"("response_format": {"type": "json_schema", "json_schema": {"name": "x", "strict": true,
      "schema": {"type": "object", "properties": {"x": {"type": "string", "pattern": "^a"}}}}})"),
           "response_format.json_schema.schema.properties.x.pattern", "`pattern` is not supported");
  bad_chat(with(R"("response_format": {"type": "json_schema", "json_schema": {"name": "x", "strict": "yes",
      "schema": {"type": "object"}}})"), "response_format.json_schema.strict", "boolean");
  bad_chat(with(R"("logit_bias": {"1": 5})"), "logit_bias");
  bad_chat(with(R"("best_of": 3)"), "best_of");
  // Explicit nulls mean "default", and harmless variants of unsupported fields pass.
  CHECK_NOTHROW(oa::parse_chat_request(body(with(R"("temperature": null, "stop": null, "n": 1,
      "response_format": {"type": "text"}, "logit_bias": {}, "tools": [])"))));
}

TEST_CASE("chat request: response_format gives the output's grammar") {
  const std::string m = R"("messages": [{"role": "user", "content": "x"}])";
  auto with = [&](std::string_view field) { return "{" + m + ", " + std::string(field) + "}"; };
  CHECK(oa::parse_chat_request(body(with(R"("response_format": {"type": "text"})"))).grammar == nullptr);
  const auto any = oa::parse_chat_request(body(with(R"("response_format": {"type": "json_object"})"))).grammar;
  REQUIRE(any != nullptr);
  CHECK(any->nodes[static_cast<size_t>(any->root)].kind == inferd::engine::grammar::Kind::Object);
  const auto strict = oa::parse_chat_request(body(with(R"("response_format": {"type": "json_schema", "json_schema":
      {"name": "p", "strict": true, "schema": {"type": "object", "properties": {"a": {"type": "integer"}},
       "required": ["a"], "additionalProperties": false}}})"))).grammar;
  REQUIRE(strict != nullptr);
  CHECK(strict->nodes[static_cast<size_t>(strict->root)].ordered);
}

TEST_CASE("chat request: tools, tool_choice, tool turns and chat_template_kwargs") {
  const std::string weather =
      R"({"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}})";
  auto r = oa::parse_chat_request(body(R"({"messages": [{"role": "user", "content": "hi"}], "tools": [)" + weather +
                                       "]}"));
  CHECK(r.chat.parse_tool_calls);  // tool_choice defaults to auto with tools
  CHECK_FALSE(r.skip_special_tokens);  // tags that are special tokens must reach the parser
  CHECK(r.chat.parallel_tool_calls);
  REQUIRE(r.chat.template_options.tools.size() == 1);
  CHECK(json::parse(r.chat.template_options.tools[0]) == json::parse(weather));

  // none: the tools are not shown to the model, nor is its output searched.
  r = oa::parse_chat_request(body(R"({"messages": [{"role": "user", "content": "hi"}], "tool_choice": "none",
                                      "tools": [)" + weather + "]}"));
  CHECK_FALSE(r.chat.parse_tool_calls);
  CHECK(r.chat.template_options.tools.empty());
  CHECK(r.skip_special_tokens);
  r = oa::parse_chat_request(body(R"({"messages": [{"role": "user", "content": "hi"}], "tools": [],
                                      "tool_choice": "none", "parallel_tool_calls": false})"));
  CHECK_FALSE(r.chat.parse_tool_calls);
  CHECK_FALSE(r.chat.parallel_tool_calls);

  // A tool round trip: the assistant's calls (arguments as JSON text) and the result.
  r = oa::parse_chat_request(body(R"({"messages": [
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
          "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "22 C"}],
      "chat_template_kwargs": {"enable_thinking": false}})"));
  REQUIRE(r.messages.size() == 3);
  REQUIRE(r.messages[1].tool_calls.size() == 1);
  CHECK(r.messages[1].tool_calls[0].name == "get_weather");
  CHECK(r.messages[1].tool_calls[0].arguments == R"({"city":"Paris"})");
  CHECK(r.messages[1].content.empty());
  CHECK(r.messages[2].tool_call_id == "call_1");
  CHECK(r.chat.template_options.enable_thinking == false);
  // An earlier turn's reasoning goes back to the template (DeepSeek-V4 keeps it in some turns).
  r = oa::parse_chat_request(body(R"({"messages": [{"role": "user", "content": "q"},
      {"role": "assistant", "content": "a", "reasoning_content": "r1"},
      {"role": "assistant", "content": "b", "reasoning": "r2"},
      {"role": "assistant", "content": "c", "reasoning_content": null}]})"));
  REQUIRE(r.messages.size() == 4);
  CHECK(r.messages[1].reasoning_content == "r1");
  CHECK(r.messages[2].reasoning_content == "r2");
  CHECK(r.messages[3].reasoning_content.empty());
  CHECK_FALSE(oa::parse_chat_request(body(R"({"messages": [{"role": "user", "content": "x"}]})"))
                  .chat.template_options.enable_thinking.has_value());
  // DeepSeek's name for the switch; either one on turns thinking on.
  auto thinking = [&](const std::string& kwargs) {
    return oa::parse_chat_request(body(R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": )" +
                                       kwargs + "}"))
        .chat.template_options.enable_thinking;
  };
  CHECK(thinking(R"({"thinking": false})") == false);
  CHECK(thinking(R"({"thinking": true})") == true);
  CHECK(thinking(R"({"thinking": true, "enable_thinking": false})") == true);
  CHECK(thinking(R"({"thinking": false, "enable_thinking": true})") == true);
  // reasoning_effort reaches the template; "none" also turns thinking off.
  auto effort = [&](const std::string& value) {
    return oa::parse_chat_request(body(R"({"messages": [{"role": "user", "content": "x"}], "reasoning_effort": )" +
                                       value + "}"))
        .chat.template_options;
  };
  CHECK(effort(R"("max")").reasoning_effort == "max");
  CHECK_FALSE(effort(R"("max")").enable_thinking.has_value());
  CHECK(effort(R"("none")").enable_thinking == false);
  CHECK_FALSE(oa::parse_chat_request(body(R"({"messages": [{"role": "user", "content": "x"}]})"))
                  .chat.template_options.reasoning_effort.has_value());
  bad_chat(R"({"messages": [{"role": "user", "content": "x"}], "reasoning_effort": "extreme"})", "reasoning_effort",
           "must be none, minimal, low, medium, high or max");
  bad_chat(R"({"messages": [{"role": "user", "content": "x"}], "reasoning_effort": 3})", "reasoning_effort");

  // required and named: the output's grammar is the calls'; the tools are still shown.
  const std::string two = R"({"messages": [{"role": "user", "content": "hi"}], "tools": [)" + weather +
                          R"(, {"type": "function", "function": {"name": "now", "strict": true}}], )";
  namespace g = inferd::engine::grammar;
  auto calls = [](const std::shared_ptr<const g::Grammar>& gr) {
    REQUIRE(gr != nullptr);
    return gr->nodes[static_cast<size_t>(gr->root)];
  };
  r = oa::parse_chat_request(body(two + R"("tool_choice": "required"})"));
  CHECK(r.chat.parse_tool_calls);
  CHECK(r.grammar == r.chat.call_grammar);
  CHECK(r.chat.calls_only);
  CHECK(r.chat.template_options.tools.size() == 2);
  CHECK(calls(r.grammar).kind == g::Kind::Repeat);
  CHECK(calls(r.grammar).max_items == -1);
  CHECK(r.grammar->nodes[static_cast<size_t>(calls(r.grammar).items)].literals.size() == 2);
  r = oa::parse_chat_request(body(two + R"("tool_choice": "required", "parallel_tool_calls": false})"));
  CHECK(calls(r.grammar).max_items == 1);
  r = oa::parse_chat_request(body(two + R"("tool_choice": {"type": "function", "function": {"name": "now"}}})"));
  CHECK(calls(r.grammar).max_items == 1);
  CHECK(r.grammar->nodes[static_cast<size_t>(calls(r.grammar).items)].literals ==
        std::vector<std::string>{"<tool_call>\n{\"name\": \"now\", \"arguments\": "});
  CHECK(r.chat.template_options.tools.size() == 2);
  // none needs no grammar, nor does auto without strict tools.
  CHECK(oa::parse_chat_request(body(two + R"("tool_choice": "none"})")).grammar == nullptr);
  CHECK(oa::parse_chat_request(body(R"({"messages": [{"role": "user", "content": "hi"}], "tools": [)" + weather +
                                    "]}")).grammar == nullptr);
  // auto with a strict tool: free text whose calls are held to the grammar; the
  // other tools' arguments are any object, so their schemas are not compiled.
  r = oa::parse_chat_request(body(R"({"messages": [{"role": "user", "content": "hi"}], "tools": [)"
                                  R"({"type": "function", "function": {"name": "loose", "parameters": {"type": "object",
                                      "properties": {"d": {"type": "string", "format": "date"}}}}},)"
                                  R"({"type": "function", "function": {"name": "now", "strict": true}}]})"));
  CHECK(calls(r.grammar).kind == g::Kind::Text);
  CHECK_FALSE(r.chat.calls_only);
  CHECK(r.chat.parse_tool_calls);

  // The tokenize route reads the same fields.
  auto t = oa::parse_tokenize_request(body(R"({"messages": [{"role": "user", "content": "hi"}], "tools": [)" +
                                           weather + "]}"));
  CHECK(t.chat.template_options.tools.size() == 1);
}

TEST_CASE("chat request: bad tool fields name their param") {
  const std::string msgs = R"({"messages": [{"role": "user", "content": "hi"}], )";
  auto with = [&](std::string_view extra) { return msgs + std::string(extra) + "}"; };
  bad_chat(with(R"("tools": {"type": "function"})"), "tools", "array");
  bad_chat(with(R"("tools": [1])"), "tools[0]", "object");
  bad_chat(with(R"("tools": [{"function": {"name": "f"}}])"), "tools[0].type", "required");
  bad_chat(with(R"("tools": [{"type": "code", "function": {"name": "f"}}])"), "tools[0].type", "function");
  bad_chat(with(R"("tools": [{"type": "function"}])"), "tools[0].function", "required");
  bad_chat(with(R"("tools": [{"type": "function", "function": {"description": "d"}}])"), "tools[0].function.name",
           "required");
  bad_chat(with(R"("tools": [{"type": "function", "function": {"name": "a b"}}])"), "tools[0].function.name",
           "a-z");
  bad_chat(with(R"("tools": [{"type": "function", "function": {"name": "f"}},
                             {"type": "function", "function": {"name": "f"}}])"),
           "tools[1].function.name", "two tools");
  bad_chat(with(R"("tools": [{"type": "function", "function": {"name": "f", "description": 3}}])"),
           "tools[0].function.description", "string");
  bad_chat(with(R"("tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}])"),
           "tools[0].function.parameters", "schema");
  // strict under auto: the strict tool's schema is compiled, so what it cannot enforce is refused.
  bad_chat(with(R"("tools": [{"type": "function", "function": {"name": "f", "strict": true, "parameters": {
      "type": "object", "properties": {"x": {"type": "string", "format": "date"}}}}}])"),
           "tools[0].function.parameters.properties.x.format", "`format` is not supported");
  bad_chat(with(R"("tools": [{"type": "function", "function": {"name": "f", "strict": "yes"}}])"),
           "tools[0].function.strict", "boolean");
  const std::string tool = R"("tools": [{"type": "function", "function": {"name": "f"}}], )";
  bad_chat(with(tool + R"("tool_choice": {"type": "function", "function": {"name": "g"}})"), "tool_choice",
           "`g`, which is not among `tools`");
  bad_chat(with(tool + R"("tool_choice": {"type": "function"})"), "tool_choice.function", "required");
  bad_chat(with(tool + R"("tool_choice": {"type": "function", "function": {}})"), "tool_choice.function.name",
           "required");
  bad_chat(with(tool + R"("tool_choice": {"type": "code", "function": {"name": "f"}})"), "tool_choice.type",
           "function");
  bad_chat(with(R"("tool_choice": "required")"), "tool_choice", "needs `tools`");
  bad_chat(with(R"("tool_choice": {"type": "function", "function": {"name": "f"}})"), "tool_choice", "not among");
  bad_chat(with(tool + R"("tool_choice": "sometimes")"), "tool_choice", "must be");
  bad_chat(with(tool + R"("tool_choice": 3)"), "tool_choice", "must be");
  // The arguments' schema: what the compiler cannot enforce, named below `parameters`.
  bad_chat(with(R"("tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
      "properties": {"x": {"type": "string", "pattern": "^a"}}}}}], "tool_choice": "required")"),
           "tools[0].function.parameters.properties.x.pattern", "`pattern` is not supported");
  bad_chat(with(R"("tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}],
      "tool_choice": "required")"), "tools[0].function.parameters", "object");
  bad_chat(with(tool + R"("tool_choice": "required", "response_format": {"type": "json_object"})"),
           "response_format", "tool_choice");
  std::string many = R"("tools": [)";
  for (int i = 0; i < 65; ++i)
    many += (i ? ", " : "") + std::string(R"({"type": "function", "function": {"name": "f)") + std::to_string(i) + "\"}}";
  CHECK_NOTHROW(oa::parse_chat_request(body(with(many + "]"))));  // auto: no grammar, no bound
  bad_chat(with(many + R"(], "tool_choice": "required")"), "tools", "at most 64 tools");
  bad_chat(with(R"("tool_choice": "auto")"), "tool_choice", "needs `tools`");
  bad_chat(with(tool + R"("parallel_tool_calls": "yes")"), "parallel_tool_calls", "boolean");
  bad_chat(with(R"("chat_template_kwargs": [])"), "chat_template_kwargs", "object");
  bad_chat(with(R"("chat_template_kwargs": {"enable_thinking": "no"})"), "chat_template_kwargs.enable_thinking",
           "boolean");
  bad_chat(with(R"("chat_template_kwargs": {"thinking": 1})"), "chat_template_kwargs.thinking", "boolean");

  auto turn = [](std::string_view m) {
    return R"({"messages": [{"role": "user", "content": "hi"}, )" + std::string(m) + "]}";
  };
  bad_chat(turn(R"({"role": "tool", "content": "r"})"), "messages[1].tool_call_id", "required");
  bad_chat(turn(R"({"role": "tool", "content": "r", "tool_call_id": 5})"), "messages[1].tool_call_id", "string");
  bad_chat(turn(R"({"role": "assistant", "tool_calls": {}})"), "messages[1].tool_calls", "array");
  bad_chat(turn(R"({"role": "assistant", "content": "a", "reasoning_content": 3})"), "messages[1].reasoning_content",
           "string");
  bad_chat(turn(R"({"role": "assistant", "tool_calls": [{"type": "function"}]})"),
           "messages[1].tool_calls[0].function", "required");
  bad_chat(turn(R"({"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]})"),
           "messages[1].tool_calls[0].function.name", "required");
  bad_chat(turn(R"({"role": "assistant", "tool_calls": [{"function": {"name": "f"}}]})"),
           "messages[1].tool_calls[0].function.arguments", "required");
  bad_chat(turn(R"({"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{no"}}]})"),
           "messages[1].tool_calls[0].function.arguments", "JSON");
  bad_chat(turn(R"({"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": {}}}]})"),
           "messages[1].tool_calls[0].function.arguments", "string");
  // Completions have no tools.
  bad_completion(R"({"prompt": "x", "tools": []})", "tools", "chat");
}

TEST_CASE("chat response and chunks with tool calls and reasoning") {
  const oa::ResponseMeta meta{"chatcmpl-t", 3, "smol"};
  oa::Choice c;
  c.finish = FinishReason::Stop;
  c.called = true;
  c.tool_calls = {{0, "call_a", "get_weather", R"({"city":"Paris"})"}, {1, "call_b", "f", "{}"}};
  c.reasoning = "think";
  auto r = oa::chat_response(meta, std::span(&c, 1), Usage{}, kBytes);
  const auto& ch = r.at("choices").at(0);
  CHECK(ch.at("finish_reason") == "tool_calls");
  const auto& m = ch.at("message");
  CHECK(m.at("content").is_null());
  CHECK(m.at("reasoning_content") == "think");
  const auto& calls = m.at("tool_calls").as_array();
  REQUIRE(calls.size() == 2);
  CHECK(calls[0] == json::parse(R"({"id": "call_a", "type": "function",
                                    "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}})"));
  // A length cut stays "length"; text beside calls is content.
  c.finish = FinishReason::Length;
  c.text = "Sure.";
  r = oa::chat_response(meta, std::span(&c, 1), Usage{}, kBytes);
  CHECK(r.at("choices").at(0).at("finish_reason") == "length");
  CHECK(r.at("choices").at(0).at("message").at("content") == "Sure.");
  // Without calls or reasoning, neither key appears.
  oa::Choice plain;
  plain.finish = FinishReason::Stop;
  const json::object pr = oa::chat_response(meta, std::span(&plain, 1), Usage{}, kBytes);
  const auto& pm = pr.at("choices").at(0).at("message");
  CHECK(pm.at("content") == "");
  CHECK_FALSE(pm.as_object().contains("tool_calls"));
  CHECK_FALSE(pm.as_object().contains("reasoning_content"));

  // Stream: a call's first delta has id, type and name; the next only arguments.
  oa::Choice head;
  head.tool_calls = {{1, "call_b", "f", ""}};
  const auto hd = oa::chat_chunk(meta, head, kBytes).at("choices").at(0).at("delta");
  CHECK(hd == json::parse(R"({"tool_calls": [{"index": 1, "id": "call_b", "type": "function",
                                               "function": {"name": "f", "arguments": ""}}]})"));
  oa::Choice args;
  args.tool_calls = {{1, "", "", "{}"}};
  args.finish = FinishReason::Stop;
  args.called = true;
  const auto ac = oa::chat_chunk(meta, args, kBytes).at("choices").at(0);
  CHECK(ac.at("delta") == json::parse(R"({"tool_calls": [{"index": 1, "function": {"arguments": "{}"}}]})"));
  CHECK(ac.at("finish_reason") == "tool_calls");
  oa::Choice thought;
  thought.reasoning = "hmm";
  CHECK(oa::chat_chunk(meta, thought, kBytes).at("choices").at(0).at("delta") ==
        json::parse(R"({"reasoning_content": "hmm"})"));
}

TEST_CASE("completion request: prompt forms") {
  auto r = oa::parse_completion_request(body(R"({"prompt": "Once", "max_tokens": 4, "logprobs": 2, "echo": false})"));
  CHECK(r.api == oa::Api::Completions);
  REQUIRE(r.prompts.size() == 1);
  CHECK(r.prompts[0].text == "Once");
  CHECK(r.add_special_tokens);
  CHECK(r.sampling.logprobs == 2);
  CHECK(r.max_tokens == 4);

  auto one = oa::parse_completion_request(body(R"({"prompt": ["Once"]})"));
  REQUIRE(one.prompts.size() == 1);
  CHECK(one.prompts[0].text == "Once");

  auto ids = oa::parse_completion_request(body(R"({"prompt": [1, 2, 3]})"));
  REQUIRE(ids.prompts.size() == 1);
  CHECK(ids.prompts[0].tokens == std::vector<int32_t>{1, 2, 3});

  auto batch = oa::parse_completion_request(body(R"({"prompt": ["a", [4, 5]], "n": 2})"));
  REQUIRE(batch.prompts.size() == 2);
  CHECK(batch.prompts[1].tokens == std::vector<int32_t>{4, 5});
  CHECK(batch.n == 2);

  auto zero = oa::parse_completion_request(body(R"({"prompt": "x", "logprobs": 0})"));
  CHECK(zero.logprobs());
  CHECK(zero.sampling.logprobs == 0);
}

TEST_CASE("completion request: bad fields") {
  bad_completion(R"({})", "prompt", "required");
  bad_completion(R"({"prompt": ""})", "prompt", "empty");
  bad_completion(R"({"prompt": []})", "prompt", "empty");
  bad_completion(R"({"prompt": 5})", "prompt");
  bad_completion(R"({"prompt": [1, "a"]})", "prompt[1]");
  bad_completion(R"({"prompt": ["a", 7]})", "prompt[1]");
  bad_completion(R"({"prompt": ["a", ""]})", "prompt[1]", "empty");
  bad_completion(R"({"prompt": [1, -3]})", "prompt[1]", "token ids");
  bad_completion(R"({"prompt": "x", "logprobs": true})", "logprobs", "integer");
  bad_completion(R"({"prompt": "x", "logprobs": 50})", "logprobs");
  bad_completion(R"({"prompt": "x", "echo": true, "logprobs": 1})", "echo");
  bad_completion(R"({"prompt": "x", "suffix": "tail"})", "suffix");
  bad_completion(R"({"prompt": "x", "max_tokens": 0})", "max_tokens");
  bad_completion(R"({"prompt": ["a", "b", "c"], "n": 50})", "n");
}

TEST_CASE("tokenize and detokenize requests") {
  auto p = oa::parse_tokenize_request(body(R"({"prompt": "hi"})"));
  CHECK(p.prompt == "hi");
  CHECK(p.add_special_tokens);
  auto m = oa::parse_tokenize_request(body(R"({"messages": [{"role": "user", "content": "hi"}],
                                                "add_generation_prompt": false})"));
  CHECK_FALSE(m.prompt);
  REQUIRE(m.messages.size() == 1);
  CHECK_FALSE(m.add_generation_prompt);
  CHECK_FALSE(m.add_special_tokens);
  expect_invalid(oa::parse_tokenize_request, R"({})", "prompt");
  expect_invalid(oa::parse_tokenize_request, R"({"prompt": 1})", "prompt");
  expect_invalid(oa::parse_tokenize_request, R"({"messages": [{"role": "x", "content": ""}]})", "messages[0].role");

  CHECK(oa::parse_detokenize_request(body(R"({"tokens": [0, 5, 9]})"), 10) == std::vector<int32_t>{0, 5, 9});
  auto detok = [](const json::object& b) { return oa::parse_detokenize_request(b, 10); };
  expect_invalid(detok, R"({})", "tokens", "required");
  expect_invalid(detok, R"({"tokens": "abc"})", "tokens");
  expect_invalid(detok, R"({"tokens": [10]})", "tokens", "outside the vocabulary");
  expect_invalid(detok, R"({"tokens": [1, "a"]})", "tokens[1]");

  const std::vector<int32_t> ids{7, 8};
  CHECK(json::serialize(oa::tokenize_response(ids, 2048)) == R"({"count":2,"max_model_len":2048,"tokens":[7,8]})");
  CHECK(json::serialize(oa::detokenize_response("a\xFF")) == "{\"prompt\":\"a\xEF\xBF\xBD\"}");
}

TEST_CASE("chat response shape") {
  const oa::ResponseMeta meta{"chatcmpl-abc", 1700000000, "smol"};
  oa::Choice c;
  c.text = "Hello world";
  c.finish = FinishReason::Stop;
  c.stop_reason = "END";
  c.logprobs = std::vector<TokenOut>{{1, -0.5f, {{1, -0.5f}, {2, -1.5f}}},
                                     {3, -std::numeric_limits<float>::infinity(), {}}};
  auto r = oa::chat_response(meta, std::span(&c, 1), Usage{5, 2, 3}, kBytes);
  CHECK(r.at("id") == "chatcmpl-abc");
  CHECK(r.at("object") == "chat.completion");
  CHECK(r.at("created") == 1700000000);
  CHECK(r.at("model") == "smol");
  const auto& ch = r.at("choices").as_array().at(0).as_object();
  CHECK(ch.at("index") == 0);
  CHECK(ch.at("message").at("role") == "assistant");
  CHECK(ch.at("message").at("content") == "Hello world");
  CHECK(ch.at("finish_reason") == "stop");
  CHECK(ch.at("stop_reason") == "END");
  const auto& content = ch.at("logprobs").at("content").as_array();
  REQUIRE(content.size() == 2);
  CHECK(content[0].at("token") == "Hello");
  CHECK(content[0].at("logprob").as_double() == doctest::Approx(-0.5));
  CHECK(content[0].at("bytes") == json::array{72, 101, 108, 108, 111});
  REQUIRE(content[0].at("top_logprobs").as_array().size() == 2);
  CHECK(content[0].at("top_logprobs").at(1).at("token") == " world");
  CHECK(content[0].at("top_logprobs").at(1).at("logprob").as_double() == doctest::Approx(-1.5));
  // Half a character is shown as U+FFFD but its bytes are exact; -inf is clamped.
  CHECK(content[1].at("token") == "\xEF\xBF\xBD\xEF\xBF\xBD");
  CHECK(content[1].at("bytes") == json::array{0xE2, 0x82});
  CHECK(content[1].at("logprob").as_double() == -9999.0);
  const auto& u = r.at("usage");
  CHECK(u.at("prompt_tokens") == 5);
  CHECK(u.at("completion_tokens") == 2);
  CHECK(u.at("total_tokens") == 7);
  CHECK(u.at("prompt_tokens_details").at("cached_tokens") == 3);

  oa::Choice plain;
  plain.index = 1;
  plain.finish = FinishReason::Length;
  auto p = oa::chat_response(meta, std::span(&plain, 1), Usage{}, kBytes);
  CHECK(p.at("choices").at(0).at("logprobs").is_null());
  CHECK(p.at("choices").at(0).at("finish_reason") == "length");
  CHECK(p.at("choices").at(0).at("stop_reason").is_null());
  CHECK(p.at("choices").at(0).at("index") == 1);
}

TEST_CASE("completion response shape: legacy logprobs") {
  const oa::ResponseMeta meta{"cmpl-1", 1, "smol"};
  oa::Choice c;
  c.text = "Hello world";
  c.finish = FinishReason::Length;
  c.logprobs = std::vector<TokenOut>{{1, -0.25f, {{2, -2.0f}}}, {2, -0.75f, {{2, -0.75f}}}};
  auto r = oa::completion_response(meta, std::span(&c, 1), Usage{3, 2, 0}, kBytes);
  CHECK(r.at("object") == "text_completion");
  const auto& ch = r.at("choices").at(0);
  CHECK(ch.at("text") == "Hello world");
  CHECK(ch.at("finish_reason") == "length");
  const auto& lp = ch.at("logprobs");
  CHECK(lp.at("tokens") == json::array{"Hello", " world"});
  CHECK(lp.at("token_logprobs").at(0).as_double() == doctest::Approx(-0.25));
  CHECK(lp.at("text_offset") == json::array{0, 5});
  // The sampled token is always among top_logprobs.
  CHECK(lp.at("top_logprobs").at(0).as_object().size() == 2);
  CHECK(lp.at("top_logprobs").at(0).at("Hello").as_double() == doctest::Approx(-0.25));
  CHECK(lp.at("top_logprobs").at(0).at(" world").as_double() == doctest::Approx(-2.0));
  CHECK(lp.at("top_logprobs").at(1).as_object().size() == 1);

  // In a stream, offsets continue from the text already sent.
  oa::Choice d;
  d.text = " world";
  d.logprobs = std::vector<TokenOut>{{2, -0.75f, {}}};
  auto chunk = oa::completion_chunk(meta, d, 5, kBytes);
  CHECK(chunk.at("choices").at(0).at("logprobs").at("text_offset") == json::array{5});
  CHECK(chunk.at("choices").at(0).at("finish_reason").is_null());
  CHECK_FALSE(chunk.at("choices").at(0).as_object().contains("stop_reason"));
}

TEST_CASE("stream chunks") {
  const oa::ResponseMeta meta{"chatcmpl-x", 2, "smol"};
  auto role = oa::chat_role_chunk(meta, 0);
  CHECK(role.at("object") == "chat.completion.chunk");
  CHECK(role.at("choices").at(0).at("delta").at("role") == "assistant");
  CHECK(role.at("choices").at(0).at("finish_reason").is_null());

  oa::Choice d;
  d.index = 2;
  d.text = "hi";
  auto mid = oa::chat_chunk(meta, d, kBytes);
  CHECK(mid.at("choices").at(0).at("index") == 2);
  CHECK(mid.at("choices").at(0).at("delta").at("content") == "hi");
  CHECK_FALSE(mid.at("choices").at(0).at("delta").as_object().contains("role"));
  CHECK(mid.at("choices").at(0).at("finish_reason").is_null());
  CHECK(mid.at("choices").at(0).at("logprobs").is_null());

  d.finish = FinishReason::Cancelled;
  CHECK(oa::chat_chunk(meta, d, kBytes).at("choices").at(0).at("finish_reason") == "abort");

  auto usage = oa::usage_chunk(meta, oa::Api::Chat, Usage{4, 6, 0});
  CHECK(usage.at("choices").as_array().empty());
  CHECK(usage.at("usage").at("total_tokens") == 10);
  CHECK(oa::usage_chunk(meta, oa::Api::Completions, Usage{}).at("object") == "text_completion");

  CHECK(oa::sse_event(json::object{{"a", 1}}) == "data: {\"a\":1}\n\n");
  CHECK(oa::kSseDone == "data: [DONE]\n\n");
}

TEST_CASE("valid_utf8") {
  CHECK(oa::valid_utf8("plain") == "plain");
  CHECK(oa::valid_utf8("\xE2\x82\xAC") == "\xE2\x82\xAC");           // €
  CHECK(oa::valid_utf8("\xF0\x9F\x98\x80") == "\xF0\x9F\x98\x80");   // 😀
  CHECK(oa::valid_utf8("a\xE2\x82") == "a\xEF\xBF\xBD\xEF\xBF\xBD");  // cut short
  CHECK(oa::valid_utf8("\xC0\xAF") == "\xEF\xBF\xBD\xEF\xBF\xBD");    // overlong
  CHECK(oa::valid_utf8("\xED\xA0\x80") == "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  CHECK(oa::valid_utf8("\xFF") == "\xEF\xBF\xBD");
}
