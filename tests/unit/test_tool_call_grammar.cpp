// The grammar of forced tool calls (tool_choice required / named): which texts
// it accepts, where it may end, that every text it lets a model write is calls
// the hermes parser reads, and its token mask.
#include <doctest/doctest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include <boost/json/parse.hpp>

#include "daemon/tool_call_parser.hpp"
#include "engine/grammar/json_schema.hpp"
#include "engine/grammar/matcher.hpp"
#include "engine/grammar/token_mask.hpp"
#include "engine/grammar/tool_calls.hpp"
#include "tests/unit/token_mask_check.hpp"

namespace g = inferd::engine::grammar;
namespace json = boost::json;

namespace {

const char* kWeather = R"({"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
  "unit": {"enum": ["c", "f"]}}, "required": ["city"], "additionalProperties": false})";
const char* kTime = R"({"type": "object", "properties": {"zone": {"type": "integer"}, "tags": {"type": "array",
  "items": {"type": "string"}}, "extra": {"type": "object"}}, "required": ["zone", "tags", "extra"]})";

std::shared_ptr<const g::Grammar> calls(int min_calls, int max_calls, bool only_weather = false) {
  std::vector<g::ToolGrammar> tools;
  tools.push_back({"get_weather", g::compile_json_schema(json::parse(kWeather), true)});
  if (!only_weather) tools.push_back({"get_time", g::compile_json_schema(json::parse(kTime), false)});
  return std::make_shared<const g::Grammar>(g::tool_calls_grammar(tools, min_calls, max_calls));
}

bool matches(const std::shared_ptr<const g::Grammar>& gr, std::string_view text) {
  g::Matcher m(gr);
  return m.accept(text) && m.can_end();
}

std::string call(std::string_view name, std::string_view args) {
  return "<tool_call>\n{\"name\": \"" + std::string(name) + "\", \"arguments\": " + std::string(args) +
         "}\n</tool_call>";
}

}  // namespace

TEST_CASE("tool call grammar: one or more calls, each to a tool with valid arguments") {
  const auto gr = calls(1, -1);
  const std::string weather = call("get_weather", R"({"city": "Paris"})");
  const std::string time = call("get_time", R"({"tags":[],"zone":-2, "extra": {"a": [1]}})");
  CHECK(matches(gr, weather));
  CHECK(matches(gr, time));
  CHECK(matches(gr, call("get_weather", R"({"city":"Oslo","unit":"f"})")));
  CHECK(matches(gr, weather + "\n" + time + "\n" + weather));  // parallel calls
  // At least one call, and nothing else: no text before, between or after.
  CHECK_FALSE(matches(gr, ""));
  CHECK_FALSE(matches(gr, "Sure. " + weather));
  CHECK_FALSE(matches(gr, weather + "\n\n" + time));
  CHECK_FALSE(matches(gr, weather + " done"));
  CHECK_FALSE(matches(gr, weather + "\n"));  // a separator promises another call
  // Only the given names, and arguments of that tool's schema.
  CHECK_FALSE(matches(gr, call("get_weathe", R"({"city": "Paris"})")));
  CHECK_FALSE(matches(gr, call("get_time", R"({"city": "Paris"})")));
  CHECK_FALSE(matches(gr, call("get_weather", R"({})")));                       // city is required
  CHECK_FALSE(matches(gr, call("get_weather", R"({"city": "Paris", "x": 1})")));  // no other keys
  CHECK_FALSE(matches(gr, call("get_weather", R"({"unit": "c", "city": "Paris"})")));  // strict: declared order
  CHECK_FALSE(matches(gr, call("get_weather", R"({"city": "Paris", "unit": "k"})")));
  CHECK_FALSE(matches(gr, call("get_weather", R"({"city": ")" + std::string(21, 'a') + "\"}")));
  CHECK(matches(gr, call("get_time", R"({"extra": {}, "zone": 3, "tags": ["x"]})")));  // not strict: any order
  CHECK_FALSE(matches(gr, call("get_time", R"({"zone": 3.5, "tags": [], "extra": {}})")));
}

TEST_CASE("tool call grammar: where it may end") {
  const std::string weather = call("get_weather", R"({"city": "Paris"})");
  // One call at most (a named function, or no parallel calls): over after the first.
  const auto one = calls(1, 1, true);
  g::Matcher m(one);
  REQUIRE(m.accept(weather.substr(0, weather.size() - 1)));
  CHECK_FALSE(m.can_end());
  REQUIRE(m.accept(">"));
  CHECK(m.can_end());
  CHECK(m.finished());
  CHECK_FALSE(matches(one, weather + "\n" + weather));
  CHECK_FALSE(matches(one, call("get_time", R"({"zone": 1, "tags": [], "extra": {}})")));
  // Unbounded: whole after each call, but a newline may still begin another.
  const auto many = calls(1, -1);
  g::Matcher n(many);
  REQUIRE(n.accept(weather));
  CHECK(n.can_end());
  CHECK_FALSE(n.finished());
  REQUIRE(n.accept("\n<tool_call>"));
  CHECK_FALSE(n.can_end());
  // Two calls at most.
  const auto two = calls(1, 2);
  CHECK(matches(two, weather + "\n" + weather));
  CHECK_FALSE(matches(two, weather + "\n" + weather + "\n" + weather));
}

TEST_CASE("tool call grammar: a function without parameters takes {}") {
  std::vector<g::ToolGrammar> tools;
  tools.push_back({"now", g::compile_json_schema(json::parse(R"({"type": "object", "additionalProperties": false})"),
                                                 false)});
  const auto gr = std::make_shared<const g::Grammar>(g::tool_calls_grammar(tools, 1, 1));
  CHECK(matches(gr, call("now", "{}")));
  CHECK_FALSE(matches(gr, call("now", R"({"a": 1})")));
}

TEST_CASE("tool call grammar: bad tool lists are refused") {
  auto tool = [](std::string name, const char* schema) {
    return g::ToolGrammar{std::move(name), g::compile_json_schema(json::parse(schema), false)};
  };
  CHECK_THROWS_AS(g::tool_calls_grammar({}, 1, 1), std::invalid_argument);
  CHECK_THROWS_AS(g::tool_calls_grammar({tool("f", "{}"), tool("f", "{}")}, 1, 1), std::invalid_argument);
  CHECK_THROWS_AS(g::tool_calls_grammar({tool("f", R"({"type": "string"})")}, 1, 1), std::invalid_argument);
  CHECK_THROWS_AS(g::tool_calls_grammar({tool("f", R"({"type": "object"})")}, 0, 1), std::invalid_argument);
  CHECK_THROWS_AS(g::tool_calls_grammar({tool("f", R"({"type": "object"})")}, 2, 1), std::invalid_argument);
  CHECK_NOTHROW(g::tool_calls_grammar({tool("f", R"({"type": "object"})")}, 1, -1));
}

TEST_CASE("tool call grammar: every text it lets out is calls the hermes parser reads") {
  // Random walks through the grammar, byte by byte, preferring to close values
  // once long enough so every walk ends; each whole text must parse as calls
  // to the given tools, with the required arguments, and nothing else.
  const auto gr = calls(1, 3);
  std::mt19937 rng(7);
  std::string alphabet = "\n";
  for (int c = 0x20; c < 0x7F; ++c) alphabet += static_cast<char>(c);
  for (int walk = 0; walk < 200; ++walk) {
    g::Matcher m(gr);
    std::string text;
    while (!m.finished()) {
      if (m.can_end() && rng() % 4 == 0) break;
      std::vector<char> next;
      for (char c : alphabet)
        if (m.accepts(std::string_view(&c, 1))) next.push_back(c);
      if (text.size() > 150) {  // close what is open
        std::vector<char> closing;
        for (char c : next)
          if (c == '"' || c == '}' || c == ']' || c == '<' || c == '/' || c == '>' || c == '\n') closing.push_back(c);
        if (!closing.empty()) next = closing;
      }
      REQUIRE_MESSAGE(!next.empty(), text);
      const char c = next[rng() % next.size()];
      REQUIRE(m.accept(std::string_view(&c, 1)));
      text += c;
    }
    CAPTURE(text);
    REQUIRE(m.can_end());
    inferd::daemon::HermesToolParser parser;
    auto split = parser.push(text);
    const auto tail = parser.finish();
    split.content += tail.content;
    split.calls.insert(split.calls.end(), tail.calls.begin(), tail.calls.end());
    CHECK(split.content.empty());
    REQUIRE(!split.calls.empty());
    CHECK(split.calls.size() <= 3);
    for (const auto& c : split.calls) {
      const json::object args = json::parse(c.arguments).as_object();
      if (c.name == "get_weather") {
        CHECK(args.at("city").is_string());
      } else {
        REQUIRE(c.name == "get_time");
        CHECK(args.at("zone").is_int64());
        CHECK(args.at("tags").is_array());
        CHECK(args.at("extra").is_object());
      }
    }
  }
}

TEST_CASE("tool call grammar: the token mask equals trying every token") {
  const std::vector<std::string> vocab = {"",       "<",        "tool",  "_call", ">\n",   "<tool_call>", "\n",
                                          "{\"",    "name",     "\": \"", "get",   "_weather", "_time", "\", \"",
                                          "arguments", "\": {",  "city",  "\": \"", "Paris", "\"}",   "}\n",
                                          "</",     "tool_call", ">",     "\n<",   "{",      "}",     "\"", " ",
                                          ":",      "\n</tool_call>", "\"}}"};
  const int32_t eos = 0;
  g::TokenIndex index(vocab);
  const auto gr = calls(1, -1);
  const std::string weather = call("get_weather", R"({"city": "Paris"})");
  const std::string doc = weather + "\n" + weather;
  g::Matcher m(gr);
  g::TokenSet got;
  for (size_t i = 0; i <= doc.size(); ++i) {
    test_mask::check_against_brute_force(index, m, vocab, eos, doc.substr(0, i), got);
    // The stop token only after a whole call.
    CHECK(g::contains(got, eos) == (i == weather.size() || i == doc.size()));
    if (i < doc.size()) REQUIRE(m.accept(doc.substr(i, 1)));
  }
}

TEST_CASE("tool call grammar in free text (tool_choice auto with strict tools)") {
  std::vector<g::ToolGrammar> tools;
  tools.push_back({"get_weather", g::compile_json_schema(json::parse(kWeather), true)});
  tools.push_back({"get_time", g::any_json_object()});
  const auto gr = std::make_shared<const g::Grammar>(g::tool_calls_in_text_grammar(tools));
  const std::string weather = call("get_weather", R"({"city": "Paris"})");
  // Free text alone, empty or not, and calls anywhere in it.
  CHECK(matches(gr, ""));
  CHECK(matches(gr, "It is sunny <tool_ in Paris, <b>really</b> <<tool_call"));
  CHECK(matches(gr, weather));
  CHECK(matches(gr, "Let me check.\n" + weather + "\nand\n" + call("get_time", R"({"any": [1]})") + " done"));
  CHECK(matches(gr, "<<tool_call>" + weather.substr(11)));  // the tag after a stray '<'
  CHECK(matches(gr, "<tool_<tool_call>" + weather.substr(11)));
  for (int n = 0; n < 20; ++n) CHECK(matches(gr, std::string(static_cast<size_t>(n), 'x') + weather + "\n"));
  // Once the tag is written, the call is held to the grammar.
  CHECK_FALSE(matches(gr, "<tool_call>"));  // an open call cannot end
  CHECK_FALSE(matches(gr, "ok <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>"));
  CHECK_FALSE(matches(gr, "ok <tool_call>\n{\"name\": \"get_news\", \"arguments\": {}}\n</tool_call>"));
  CHECK_FALSE(matches(gr, "ok <tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>"));
  CHECK_FALSE(matches(gr, call("get_time", "[]")));
  // Many calls keep the stack flat (a call returns to the text it began in).
  std::string many;
  for (int i = 0; i < 100; ++i) many += "call " + weather + "\n";
  CHECK(matches(gr, many));
  // After a whole call the text may end or go on.
  g::Matcher m(gr);
  REQUIRE(m.accept("a " + weather));
  CHECK(m.can_end());
  CHECK_FALSE(m.finished());
}

TEST_CASE("tool call grammar in free text: the token mask equals trying every token") {
  const std::vector<std::string> vocab = {"",        "<",  "tool", "_call", ">\n", "<tool_call>", "\n",    "{\"", "name",
                                          "\": \"",  "get", "_weather", "_time", "\", \"", "arguments", "\": {",
                                          "city", "Paris", "\"}", "}\n", "</", "tool_call", ">", "\n<", "{", "}",
                                          "\"", " ", "Hi", " there", "\xC3", "\xA9", "<tool", "\n</tool_call>"};
  const int32_t eos = 0;
  g::TokenIndex index(vocab);
  std::vector<g::ToolGrammar> tools;
  tools.push_back({"get_weather", g::compile_json_schema(json::parse(kWeather), true)});
  const auto gr = std::make_shared<const g::Grammar>(g::tool_calls_in_text_grammar(tools));
  const std::string weather = call("get_weather", R"({"city": "Paris"})");
  const std::string doc = "Hi \xC3\xA9 <tool " + weather + " there";
  g::Matcher m(gr);
  g::TokenSet got;
  const size_t open = doc.find("<tool_call>") + 11, close = doc.find("</tool_call>") + 12;
  for (size_t i = 0; i <= doc.size(); ++i) {
    test_mask::check_against_brute_force(index, m, vocab, eos, doc.substr(0, i), got);
    CHECK(g::contains(got, eos) == (i < open || i >= close));  // no stop inside a call
    if (i < doc.size()) REQUIRE(m.accept(doc.substr(i, 1)));
  }
}

// ---- DSML (DeepSeek's layout) ----

namespace {

std::shared_ptr<const g::Grammar> dsml_calls(int max_calls, const std::string& block = "tool_calls") {
  std::vector<g::ToolGrammar> tools;
  tools.push_back({"get_weather", g::compile_json_schema(json::parse(kWeather), true)});
  tools.push_back({"get_time", g::compile_json_schema(json::parse(kTime), false)});
  return std::make_shared<const g::Grammar>(g::dsml_tool_calls_grammar(tools, max_calls, block));
}

std::string param(std::string_view name, bool is_string, std::string_view value) {
  return "<｜DSML｜parameter name=\"" + std::string(name) + "\" string=\"" + (is_string ? "true" : "false") + "\">" +
         std::string(value) + "</｜DSML｜parameter>\n";
}

std::string invoke(std::string_view name, const std::string& params) {
  return "<｜DSML｜invoke name=\"" + std::string(name) + "\">\n" + params + "</｜DSML｜invoke>\n";
}

std::string block(const std::string& invokes, std::string_view name = "tool_calls") {
  return "<｜DSML｜" + std::string(name) + ">\n" + invokes + "</｜DSML｜" + std::string(name) + ">";
}

}  // namespace

TEST_CASE("tool call grammar, DSML: calls as DeepSeek writes them, each to a tool with valid arguments") {
  const auto many = dsml_calls(-1), one = dsml_calls(1);
  const std::string paris = invoke("get_weather", param("city", true, "Paris"));
  const std::string time = invoke("get_time", param("zone", false, "-2") + param("tags", false, R"(["a"])") +
                                                  param("extra", false, R"({"k": [1]})"));
  CHECK(matches(many, block(paris)));
  CHECK(matches(one, block(paris)));
  CHECK(matches(many, block(paris + time + paris)));  // parallel calls
  CHECK_FALSE(matches(one, block(paris + time)));
  CHECK(matches(many, block(invoke("get_weather", param("city", true, "São <Paulo>\nSP") + param("unit", true, "f")))));
  CHECK(matches(dsml_calls(1, "function_calls"), block(paris, "function_calls")));
  CHECK_FALSE(matches(many, block(paris, "function_calls")));
  // Nothing around the block, a call at least, the required parameters in declared order.
  CHECK_FALSE(matches(many, "Sure. " + block(paris)));
  CHECK_FALSE(matches(many, block(paris) + "\n"));
  CHECK_FALSE(matches(many, block("")));
  CHECK_FALSE(matches(many, block(invoke("get_weather", ""))));                          // city is required
  CHECK_FALSE(matches(many, block(invoke("get_weather", param("unit", true, "c") + param("city", true, "X")))));
  CHECK_FALSE(matches(many, block(invoke("get_weather", param("city", true, "X") + param("unit", true, "k")))));
  CHECK_FALSE(matches(many, block(invoke("get_weather", param("city", false, "\"X\"")))));  // a string is raw text
  CHECK_FALSE(matches(many, block(invoke("get_time", param("zone", true, "3") + param("tags", false, "[]") +
                                                          param("extra", false, "{}")))));
  CHECK_FALSE(matches(many, block(invoke("get_time", param("zone", false, "3.5") + param("tags", false, "[]") +
                                                          param("extra", false, "{}")))));
  CHECK_FALSE(matches(many, block(invoke("get_weathe", param("city", true, "X")))));
  // Where it may end: only after the block's close.
  g::Matcher m(many);
  const std::string whole = block(paris);
  REQUIRE(m.accept(whole.substr(0, whole.size() - 1)));
  CHECK_FALSE(m.can_end());
  REQUIRE(m.accept(">"));
  CHECK(m.can_end());
}

TEST_CASE("tool call grammar, DSML: every text it lets out is calls the deepseek_v4 parser reads") {
  const auto gr = dsml_calls(-1);
  std::mt19937 rng(11);
  std::string alphabet = "\n";
  for (int c = 0x20; c < 0x7F; ++c) alphabet += static_cast<char>(c);
  for (unsigned char c : std::string("｜")) alphabet += static_cast<char>(c);  // the bytes of U+FF5C
  for (int walk = 0; walk < 200; ++walk) {
    g::Matcher m(gr);
    std::string text;
    while (!m.finished()) {
      if (m.can_end()) break;
      std::vector<char> next;
      for (char c : alphabet)
        if (m.accepts(std::string_view(&c, 1))) next.push_back(c);
      // Text as a model writes it, valid UTF-8: bytes past ASCII only where the grammar leaves no other.
      if (std::any_of(next.begin(), next.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; }))
        std::erase_if(next, [](char c) { return static_cast<unsigned char>(c) >= 0x80; });
      if (text.size() > 400) {  // close what is open: a closing tag's next byte, else JSON's
        std::vector<char> closing;
        for (std::string_view tag : {"</｜DSML｜parameter>\n", "</｜DSML｜invoke>\n", "</｜DSML｜tool_calls>"})
          for (size_t k = std::min(tag.size() - 1, text.size()) + 1; k-- > 0 && closing.empty();)
            if (std::string_view(text).ends_with(tag.substr(0, k)) && m.accepts(tag.substr(k, 1)))
              closing.push_back(tag[k]);
        for (char c : std::string_view("\"}]"))
          if (closing.empty() && m.accepts(std::string_view(&c, 1))) closing.push_back(c);
        if (!closing.empty()) next = closing;
      }
      REQUIRE_MESSAGE(!next.empty(), text);
      const char c = next[rng() % next.size()];
      REQUIRE(m.accept(std::string_view(&c, 1)));
      text += c;
      REQUIRE(text.size() < 20000);
    }
    CAPTURE(text);
    REQUIRE(m.can_end());
    auto parser = inferd::daemon::make_tool_call_parser("deepseek_v4");
    auto split = parser->push(text);
    const auto tail = parser->finish();
    split.content += tail.content;
    split.calls.insert(split.calls.end(), tail.calls.begin(), tail.calls.end());
    CHECK(split.content.empty());
    REQUIRE(!split.calls.empty());
    for (const auto& c : split.calls) {
      const json::object args = json::parse(c.arguments).as_object();
      if (c.name == "get_weather") {
        CHECK(args.at("city").is_string());
        if (args.contains("unit")) CHECK((args.at("unit") == "c" || args.at("unit") == "f"));
      } else {
        REQUIRE(c.name == "get_time");
        CHECK(args.at("zone").is_int64());
        CHECK(args.at("tags").is_array());
        CHECK(args.at("extra").is_object());
      }
    }
  }
}

TEST_CASE("tool call grammar, DSML: what it cannot hold to a schema is refused") {
  auto tool = [](std::string name, const char* schema) {
    return g::ToolGrammar{std::move(name), g::compile_json_schema(json::parse(schema), false)};
  };
  CHECK_THROWS_AS(g::dsml_tool_calls_grammar({tool("f", R"({"type": "object"})")}, 1, "tool_calls"),
                  std::invalid_argument);  // free keys
  CHECK_THROWS_AS(g::dsml_tool_calls_grammar({tool("f", R"({"type": "object", "properties": {"a\"b": {}}})")}, 1,
                                             "tool_calls"),
                  std::invalid_argument);
  CHECK_THROWS_AS(g::dsml_tool_calls_grammar({tool("f\"", R"({"type": "object", "properties": {}})")}, 1, "tool_calls"),
                  std::invalid_argument);
  CHECK_THROWS_AS(g::dsml_tool_calls_grammar({tool("f", R"({"type": "object", "properties": {}})")}, 2, "tool_calls"),
                  std::invalid_argument);
  // No parameters: an invoke with none.
  const auto none = std::make_shared<const g::Grammar>(g::dsml_tool_calls_grammar(
      {tool("now", R"({"type": "object", "properties": {}, "additionalProperties": false})")}, 1, "tool_calls"));
  CHECK(matches(none, block(invoke("now", ""))));
}
