// Output parsers: tool calls (hermes, mistral, llama3_json, deepseek_v32,
// deepseek_v4) and reasoning (deepseek_r1, qwen3, deepseek_v4), whole and in
// pieces split at every point, which must agree. DeepSeek's are also checked
// against vLLM's reading of the same outputs (tests/golden/dsml_outputs.json).
#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <vector>

#include "daemon/dsml_tool_parser.hpp"
#include "daemon/json_tool_parsers.hpp"
#include "daemon/reasoning_parser.hpp"
#include "daemon/tool_call_parser.hpp"
#include "engine/chat_template.hpp"
#include "golden_runner.hpp"
#include "test_paths.hpp"

using namespace inferd::daemon;

namespace {

ToolCallSplit tools_whole(const std::string& text, std::string_view parser = "hermes") {
  auto p = make_tool_call_parser(parser);
  ToolCallSplit out = p->push(text);
  ToolCallSplit tail = p->finish();
  out.content += tail.content;
  out.calls.insert(out.calls.end(), tail.calls.begin(), tail.calls.end());
  return out;
}

// `text` in pieces cut at `cuts`; every piece's output appended.
ToolCallSplit tools_pieces(const std::string& text, const std::vector<size_t>& cuts, std::string* leaked = nullptr,
                           std::string_view parser = "hermes") {
  auto p = make_tool_call_parser(parser);
  ToolCallSplit out;
  size_t at = 0;
  auto add = [&](ToolCallSplit s) {
    out.content += s.content;
    out.calls.insert(out.calls.end(), s.calls.begin(), s.calls.end());
  };
  for (size_t c : cuts) {
    add(p->push(text.substr(at, c - at)));
    at = c;
  }
  add(p->push(text.substr(at)));
  if (leaked) *leaked = out.content;
  add(p->finish());
  return out;
}

void check_same(const ToolCallSplit& a, const ToolCallSplit& b) {
  CHECK(a.content == b.content);
  REQUIRE(a.calls.size() == b.calls.size());
  for (size_t i = 0; i < a.calls.size(); ++i) {
    CHECK(a.calls[i].name == b.calls[i].name);
    CHECK(a.calls[i].arguments == b.calls[i].arguments);
  }
}

// Whole, then split once at every point and in single bytes: all the same.
// `tag_start` is the first character of the format's tag: before the end, no
// piece of a tag ever shows as text.
void check_every_split(const std::string& text, const ToolCallSplit& want, std::string_view parser = "hermes",
                       char tag_start = '<') {
  CAPTURE(parser);
  CAPTURE(text);
  check_same(tools_whole(text, parser), want);
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    CAPTURE(cut);
    std::string early;
    check_same(tools_pieces(text, {cut}, &early, parser), want);
    CHECK((early.find(tag_start) == std::string::npos || want.content.find(tag_start) != std::string::npos));
  }
  std::vector<size_t> bytes;
  for (size_t i = 1; i < text.size(); ++i) bytes.push_back(i);
  check_same(tools_pieces(text, bytes, nullptr, parser), want);
}

void check_mistral(const std::string& text, const ToolCallSplit& want) { check_every_split(text, want, "mistral", '['); }
void check_llama3(const std::string& text, const ToolCallSplit& want) { check_every_split(text, want, "llama3_json", '{'); }

ReasoningSplit reason(ReasoningFormat f, const std::string& text, const std::vector<size_t>& cuts,
                      std::optional<bool> thinking = std::nullopt) {
  ReasoningParser p(f, thinking);
  ReasoningSplit out;
  size_t at = 0;
  auto add = [&](ReasoningSplit s) {
    out.reasoning += s.reasoning;
    out.content += s.content;
  };
  for (size_t c : cuts) {
    add(p.push(text.substr(at, c - at)));
    at = c;
  }
  add(p.push(text.substr(at)));
  add(p.finish());
  return out;
}

// Whole, split once at every point, and byte by byte; every split the same.
std::vector<std::vector<size_t>> every_split(const std::string& text) {
  std::vector<std::vector<size_t>> splits{{}};
  for (size_t cut = 0; cut <= text.size(); ++cut) splits.push_back({cut});
  std::vector<size_t> bytes;
  for (size_t i = 1; i < text.size(); ++i) bytes.push_back(i);
  splits.push_back(bytes);
  return splits;
}

void check_reasoning(ReasoningFormat f, const std::string& text, const std::string& reasoning,
                     const std::string& content, std::optional<bool> thinking = std::nullopt) {
  CAPTURE(text);
  for (const auto& cuts : every_split(text)) {
    const ReasoningSplit r = reason(f, text, cuts, thinking);
    CHECK(r.reasoning == reasoning);
    CHECK(r.content == content);
  }
}

}  // namespace

TEST_CASE("hermes: text without calls passes through unchanged") {
  check_every_split("Hello, world. a < b and <tool no", {"Hello, world. a < b and <tool no", {}});
  check_every_split("  spaced  \n", {"  spaced  \n", {}});
  check_every_split("", {"", {}});
}

TEST_CASE("hermes: one call, with text before it") {
  const std::string text =
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n"
      "</tool_call>";
  check_every_split(text, {"Let me check.", {{"get_weather", R"({"city":"Paris","days":2})"}}});
}

TEST_CASE("hermes: parallel calls; whitespace between them is not text") {
  const std::string text =
      "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n"
      "<tool_call>{\"name\": \"b\", \"arguments\": {\"x\": [1, {\"y\": \"</tool\"}]}}</tool_call>\n";
  check_every_split(text, {"", {{"a", "{}"}, {"b", R"({"x":[1,{"y":"</tool"}]})"}}});
}

TEST_CASE("hermes: text after a call is kept; missing arguments are {}") {
  check_every_split("<tool_call>{\"name\": \"f\"}</tool_call>\nDone.", {"Done.", {{"f", "{}"}}});
}

TEST_CASE("hermes: a malformed call is text, tags and all") {
  check_every_split("Hi <tool_call>{\"name\": \"f\", \"arguments\": {</tool_call>",
                    {"Hi <tool_call>{\"name\": \"f\", \"arguments\": {</tool_call>", {}});
  check_every_split("<tool_call>{\"arguments\": {}}</tool_call>", {"<tool_call>{\"arguments\": {}}</tool_call>", {}});
  check_every_split("<tool_call>{\"name\": \"f\", \"arguments\": \"x\"}</tool_call>",
                    {"<tool_call>{\"name\": \"f\", \"arguments\": \"x\"}</tool_call>", {}});
  // A good call and a bad one: the good one is a call, the bad one text.
  check_every_split("<tool_call>{\"name\": \"f\"}</tool_call>\n<tool_call>nope</tool_call>",
                    {"<tool_call>nope</tool_call>", {{"f", "{}"}}});
}

TEST_CASE("hermes: an unclosed call at the end is text") {
  check_every_split("ok\n<tool_call>{\"name\": \"f\", \"argu", {"ok\n<tool_call>{\"name\": \"f\", \"argu", {}});
  check_every_split("ok <tool_ca", {"ok <tool_ca", {}});
}

TEST_CASE("hermes: a partial opening tag is held back until it cannot be one") {
  HermesToolParser p;
  CHECK(p.push("Sure <tool_").content == "Sure");
  CHECK(p.push("cal").content.empty());
  const ToolCallSplit s = p.push("l>{\"name\": \"f\"}</tool_call>");
  CHECK(s.content.empty());
  REQUIRE(s.calls.size() == 1);
  CHECK(p.calls() == 1);
  HermesToolParser q;
  CHECK(q.push("a <tool").content == "a");
  CHECK(q.push("box").content == " <toolbox");
}

TEST_CASE("reasoning parser names") {
  CHECK(reasoning_format("") == ReasoningFormat::None);
  CHECK(reasoning_format("deepseek_r1") == ReasoningFormat::DeepSeekR1);
  CHECK(reasoning_format("qwen3") == ReasoningFormat::Qwen3);
  CHECK_FALSE(reasoning_format("granite"));
  CHECK(known_tool_call_parser("hermes"));
  CHECK(known_tool_call_parser(""));
  CHECK(known_tool_call_parser("mistral"));
  CHECK(known_tool_call_parser("llama3_json"));
  CHECK_FALSE(known_tool_call_parser("pythonic"));
  CHECK(dynamic_cast<HermesToolParser*>(make_tool_call_parser("").get()));
  CHECK(dynamic_cast<MistralToolParser*>(make_tool_call_parser("mistral").get()));
  CHECK(dynamic_cast<Llama3JsonToolParser*>(make_tool_call_parser("llama3_json").get()));
}

TEST_CASE("mistral: text without calls passes through unchanged") {
  check_mistral("Hello [world] a [TOOL no", {"Hello [world] a [TOOL no", {}});
  check_mistral("  spaced  \n", {"  spaced  \n", {}});
  check_mistral("", {"", {}});
}

TEST_CASE("mistral: [TOOL_CALLS] and an array of calls, with text before and after") {
  check_mistral("[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}]",
                {"", {{"get_weather", R"({"city":"Paris","days":2})"}}});
  check_mistral("Let me check.\n[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {}}, "
                "{\"name\": \"b\", \"arguments\": {\"x\": [1, \"]\"]}, \"id\": \"abc123def\"}]\nDone.",
                {"Let me check.Done.", {{"a", "{}"}, {"b", R"({"x":[1,"]"]})"}}});
  check_mistral("[TOOL_CALLS][{\"name\": \"f\"}]", {"", {{"f", "{}"}}});
}

TEST_CASE("mistral: what is not an array of calls is text, tag and all") {
  check_mistral("[TOOL_CALLS] sorry", {"[TOOL_CALLS] sorry", {}});
  check_mistral("[TOOL_CALLS][]", {"[TOOL_CALLS][]", {}});
  check_mistral("[TOOL_CALLS][{\"arguments\": {}}]", {"[TOOL_CALLS][{\"arguments\": {}}]", {}});
  check_mistral("[TOOL_CALLS][{\"name\": \"f\", \"arguments\": \"x\"}]",
                {"[TOOL_CALLS][{\"name\": \"f\", \"arguments\": \"x\"}]", {}});
  check_mistral("[TOOL_CALLS][{\"name\": \"f\", ]", {"[TOOL_CALLS][{\"name\": \"f\", ]", {}});
  // Unfinished at the end.
  check_mistral("ok [TOOL_CALLS][{\"name\": \"f\"", {"ok [TOOL_CALLS][{\"name\": \"f\"", {}});
  check_mistral("ok [TOOL_CA", {"ok [TOOL_CA", {}});
}

TEST_CASE("mistral: a partial tag is held back; the calls come out when the array closes") {
  MistralToolParser p;
  CHECK(p.push("Sure [TOOL_").content == "Sure");
  CHECK(p.push("CALLS][{\"name\": \"f\", \"arguments\": {\"a\": 1}}").calls.empty());
  const ToolCallSplit s = p.push("]");
  REQUIRE(s.calls.size() == 1);
  CHECK(s.calls[0].arguments == R"({"a":1})");
  CHECK(p.calls() == 1);
  MistralToolParser q;
  CHECK(q.push("a [TOOL").content == "a");
  CHECK(q.push("S]").content == " [TOOLS]");
}

TEST_CASE("llama3_json: a JSON object as the whole output is a call") {
  check_llama3("{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
               {"", {{"get_weather", R"({"city":"Paris"})"}}});
  check_llama3("\n<|python_tag|>{\"type\": \"function\", \"name\": \"f\", \"arguments\": {\"x\": \"}\"}}\n",
               {"", {{"f", R"({"x":"}"})"}}});
  check_llama3("{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\"}", {"", {{"a", "{}"}, {"b", "{}"}}});
  check_llama3("{\"name\": \"a\", \"parameters\": {}} That is all.", {"That is all.", {{"a", "{}"}}});
}

TEST_CASE("llama3_json: anything else is the answer, whole") {
  check_llama3("The answer is {\"name\": \"a\"}.", {"The answer is {\"name\": \"a\"}.", {}});
  check_llama3("  spaced  \n", {"  spaced  \n", {}});
  check_llama3("", {"", {}});
  check_llama3("<|python", {"<|python", {}});
  // JSON that is not a call: an answer in JSON stays the answer.
  check_llama3("{\"name\": \"Bob\", \"age\": 3}", {"{\"name\": \"Bob\", \"age\": 3}", {}});
  check_llama3(" {\"answer\": 42}", {" {\"answer\": 42}", {}});
  check_llama3("{\"name\": \"f\", \"parameters\": [1]}", {"{\"name\": \"f\", \"parameters\": [1]}", {}});
  check_llama3("{\"name\": \"f\", \"param", {"{\"name\": \"f\", \"param", {}});
  // A good call, then an unfinished or bad one: that is text.
  check_llama3("{\"name\": \"a\"}; {\"nam", {"; {\"nam", {{"a", "{}"}}});
  check_llama3("{\"name\": \"a\"}; nope", {"; nope", {{"a", "{}"}}});
}

TEST_CASE("tool-call parsers: the chat template names its model's format") {
  using inferd::engine::ChatTemplate;
  CHECK(ChatTemplate("<|im_start|>{{ m }}", "t").tool_call_format() == "hermes");
  CHECK(ChatTemplate("<|im_start|>{% if tools %}<tool_call>{% endif %}", "t").tool_call_format() == "hermes");
  CHECK(ChatTemplate("{{ '[AVAILABLE_TOOLS]' }}{{ '[TOOL_CALLS]' }}", "t").tool_call_format() == "mistral");
  CHECK(ChatTemplate("<|start_header_id|>{{ '<|python_tag|>' }}", "t").tool_call_format() == "llama3_json");
  CHECK(ChatTemplate("<|start_header_id|>Given the following functions, please respond with a JSON for a "
                             "function call with its proper arguments", "t").tool_call_format() == "llama3_json");
  CHECK(ChatTemplate("<|start_header_id|>{{ m }}", "t").tool_call_format() == "hermes");
}

TEST_CASE("deepseek_r1: reasoning up to </think>, with or without the opening tag") {
  const auto f = ReasoningFormat::DeepSeekR1;
  check_reasoning(f, "<think>\nHmm, 2+2.\n</think>\n\nIt is 4.", "\nHmm, 2+2.\n", "\n\nIt is 4.");
  check_reasoning(f, "Hmm.</think>Four", "Hmm.", "Four");
  check_reasoning(f, "</think>Four", "", "Four");
  // Never closed: all reasoning, a partial tag included.
  check_reasoning(f, "still thinking </thi", "still thinking </thi", "");
  check_reasoning(f, "<thin", "<thin", "");
  check_reasoning(f, "", "", "");
}

TEST_CASE("qwen3: reasoning only inside a leading <think> block") {
  const auto f = ReasoningFormat::Qwen3;
  check_reasoning(f, "<think>\nplan\n</think>\n\nAnswer <think>x</think>", "\nplan\n", "\n\nAnswer <think>x</think>");
  check_reasoning(f, "No thinking here.", "", "No thinking here.");
  check_reasoning(f, "<thin", "", "<thin");
  check_reasoning(f, "<think>unfinished", "unfinished", "");
}

TEST_CASE("no reasoning parser: everything is content") {
  check_reasoning(ReasoningFormat::None, "<think>a</think>b", "", "<think>a</think>b");
}

// ---- DeepSeek: DSML tool calls, deepseek_v4 reasoning --------------------------

namespace {

const std::string kD = "｜DSML｜";

std::string param(const std::string& name, const std::string& value, const std::string& string_attr = "true") {
  return "<" + kD + "parameter name=\"" + name + "\" string=\"" + string_attr + "\">" + value + "</" + kD +
         "parameter>";
}
std::string invoke(const std::string& name, const std::vector<std::string>& params) {
  std::string s = "<" + kD + "invoke name=\"" + name + "\">\n";
  for (const auto& p : params) s += p + "\n";
  return s + "</" + kD + "invoke>";
}
std::string block(const std::vector<std::string>& invokes, const std::string& wrapper = "tool_calls") {
  std::string s = "<" + kD + wrapper + ">\n";
  for (const auto& i : invokes) s += i + "\n";
  return s + "</" + kD + wrapper + ">";
}

void check_v4(const std::string& text, const ToolCallSplit& want) { check_every_split(text, want, "deepseek_v4"); }

}  // namespace

TEST_CASE("deepseek_v4: text without calls passes through unchanged") {
  check_v4("Plain answer.", {"Plain answer.", {}});
  check_v4("a <｜DSML｜ b <｜DSML｜tool_call c", {"a <｜DSML｜ b <｜DSML｜tool_call c", {}});
  check_v4("", {"", {}});
}

TEST_CASE("deepseek_v4: one block, calls typed by their string attribute") {
  const std::string weather = invoke("get_weather", {param("city", "Paris"), param("days", "2", "false")});
  check_v4("Let me check.\n\n" + block({weather}),
           {"Let me check.", {{"get_weather", R"({"city":"Paris","days":2})"}}});
  // string="false" is JSON, or the text when it is not JSON; no attribute reads as false.
  const std::string typed = invoke(
      "set", {param("n", "42", "true"), param("list", "[1, {\"a\": null}]", "false"), param("flag", "true", "false"),
              param("word", "not json", "false"), "<" + kD + "parameter name=\"x\">1.5</" + kD + "parameter>",
              param("empty", "", "true"), param("n", "7", "false")});
  check_v4(block({typed, invoke("ping", {})}),
           {"",
            {{"set", R"({"n":7,"list":[1,{"a":null}],"flag":true,"word":"not json","x":1.5E0,"empty":""})"},
             {"ping", "{}"}}});
  // Values are text up to their closing tag: newlines, quotes, markup and other DSML are kept.
  check_v4(block({invoke("echo", {param("t", "a\n\"b\" <i> </｜DSML｜invoke> \\")})}),
           {"", {{"echo", R"({"t":"a\n\"b\" <i> </｜DSML｜invoke> \\"})"}}});
}

TEST_CASE("deepseek_v4: text after a block is kept; blocks in a row each give their calls") {
  const std::string b = block({invoke("f", {})});
  check_v4(b + "\nDone.", {"Done.", {{"f", "{}"}}});
  check_v4(b + "\n\n" + b, {"", {{"f", "{}"}, {"f", "{}"}}});
}

TEST_CASE("deepseek_v4: a block that is not all well-formed invokes is text, tags and all") {
  for (const std::string& bad : {
           block({}),                                                                  // no invoke
           block({invoke("", {})}),                                                    // no name
           block({"junk", invoke("f", {})}),                                           // text between invokes
           block({invoke("f", {"junk"})}),                                             // text between parameters
           block({invoke("f", {"<" + kD + "parameter name=\"a\" string=\"true\">open"})}),  // unclosed parameter
           block({invoke("f", {param("", "v")})}),                                     // a parameter without a name
           "<" + kD + "tool_calls><" + kD + "invoke name=\"f\"></" + kD + "tool_calls>",  // unclosed invoke
           block({invoke("f", {param("a", "\xff\xfe")})}),                               // not UTF-8
       }) {
    check_v4("Hi " + bad, {"Hi " + bad, {}});
  }
  // A good block and a bad one: the good one's calls, the bad one text.
  check_v4(block({invoke("f", {})}) + block({}), {block({}), {{"f", "{}"}}});
}

TEST_CASE("deepseek_v4: an unclosed block at the end is text") {
  const std::string open = "ok\n<" + kD + "tool_calls>\n" + invoke("f", {param("a", "b")});
  check_v4(open, {open, {}});
  check_v4("ok <｜DSML｜too", {"ok <｜DSML｜too", {}});
}

TEST_CASE("deepseek_v32: the same invokes in a function_calls block") {
  const std::string b = block({invoke("f", {param("a", "1", "false")})}, "function_calls");
  check_every_split("Sure.\n" + b, {"Sure.", {{"f", R"({"a":1})"}}}, "deepseek_v32");
  // Each reads only its own block.
  check_v4(b, {b, {}});
  const std::string v4 = block({invoke("f", {})});
  check_every_split(v4, {v4, {}}, "deepseek_v32");
}

TEST_CASE("DSML parser names and detection from the chat template") {
  CHECK(known_tool_call_parser("deepseek_v4"));
  CHECK(known_tool_call_parser("deepseek_v32"));
  CHECK_FALSE(known_tool_call_parser("deepseek_v31"));
  CHECK(dynamic_cast<DsmlToolParser*>(make_tool_call_parser("deepseek_v4").get()));
  CHECK(dynamic_cast<DsmlToolParser*>(make_tool_call_parser("deepseek_v32").get()));
  CHECK(reasoning_format("deepseek_v4") == ReasoningFormat::DeepSeekV4);
  using inferd::engine::ChatTemplate;
  // DeepSeek-V4's template spells the block's tag in parts.
  const ChatTemplate v4(
      "{%- set dsml_token = '｜DSML｜' -%}{%- set thinking_start_token = '<think>' -%}"
      "{{- '\\n\\n<' + dsml_token + 'tool_calls>\\n' -}}",
      "test");
  CHECK(v4.tool_call_format() == "deepseek_v4");
  CHECK(v4.reasoning_format() == "deepseek_v4");
  const ChatTemplate v32("{{ '<｜DSML｜function_calls>' }}", "test");
  CHECK(v32.tool_call_format() == "deepseek_v32");
  CHECK(v32.reasoning_format().empty());
  CHECK(ChatTemplate("<|im_start|>{{ m }}<think>", "test").reasoning_format().empty());
}

TEST_CASE("deepseek_v4 reasoning, thinking on: up to </think> or a tool-call block") {
  const auto f = ReasoningFormat::DeepSeekV4;
  for (std::optional<bool> on : {std::optional<bool>(), std::optional<bool>(true)}) {
    check_reasoning(f, "Hmm, 2+2.\n</think>\n\nIt is 4.", "Hmm, 2+2.", "\n\nIt is 4.", on);
    check_reasoning(f, "<think>Hmm.</think>Four", "Hmm.", "Four", on);
    check_reasoning(f, "Need a tool. \n\n<｜DSML｜tool_calls>\nx", "Need a tool.", "<｜DSML｜tool_calls>\nx", on);
    check_reasoning(f, "a</think>b <｜DSML｜tool_calls>", "a", "b <｜DSML｜tool_calls>", on);
    // Never closed: all reasoning, partial tags included, trailing whitespace dropped.
    check_reasoning(f, "still thinking </thi", "still thinking </thi", "", on);
    check_reasoning(f, "still <｜DSML｜to \n", "still <｜DSML｜to", "", on);
    check_reasoning(f, "  \n", "", "", on);
  }
}

TEST_CASE("deepseek_v4 reasoning, thinking off: only a leading <think> block") {
  const auto f = ReasoningFormat::DeepSeekV4;
  check_reasoning(f, "Answer </think> here.", "", "Answer </think> here.", false);
  check_reasoning(f, "<think>short \n</think>Answer.", "short", "Answer.", false);
  check_reasoning(f, "<think>a<｜DSML｜tool_calls>", "a", "<｜DSML｜tool_calls>", false);
  check_reasoning(f, "<thin", "", "<thin", false);
}

TEST_CASE("DeepSeek outputs split as vLLM splits them") {
  // Content is compared without the whitespace next to a block, which vLLM keeps and these parsers drop.
  auto trim = [](std::string s) {
    const size_t e = s.find_last_not_of(" \t\r\n");
    return s.substr(0, e == std::string::npos ? 0 : e + 1);
  };
  const auto golden = test_golden::read_golden(test_paths::source_dir() + "/tests/golden/dsml_outputs.json");
  const auto& cases = golden.at("cases").as_array();
  REQUIRE(cases.size() >= 16);
  for (const auto& cv : cases) {
    const auto& c = cv.as_object();
    const std::string parser(c.at("parser").as_string());
    const std::string text(c.at("output").as_string());
    const bool thinking = c.at("thinking").as_bool();
    CAPTURE(parser);
    CAPTURE(thinking);
    CAPTURE(text);
    const auto& want_calls = c.at("calls").as_array();
    for (const auto& cuts : every_split(text)) {
      std::optional<ReasoningParser> r;
      if (parser == "deepseek_v4") r.emplace(ReasoningFormat::DeepSeekV4, thinking);
      auto tools = make_tool_call_parser(parser);
      std::string reasoning, content;
      std::vector<ParsedToolCall> calls;
      auto tool_text = [&](ToolCallSplit t) {
        content += t.content;
        calls.insert(calls.end(), t.calls.begin(), t.calls.end());
      };
      auto feed = [&](std::string_view piece, bool last) {
        ReasoningSplit s{"", std::string(piece)};
        if (r) {
          s = r->push(piece);
          if (last) {
            ReasoningSplit tail = r->finish();
            s.reasoning += tail.reasoning;
            s.content += tail.content;
          }
        }
        reasoning += s.reasoning;
        tool_text(tools->push(s.content));
        if (last) tool_text(tools->finish());
      };
      size_t at = 0;
      for (size_t cut : cuts) {
        feed(std::string_view(text).substr(at, cut - at), false);
        at = cut;
      }
      feed(std::string_view(text).substr(at), true);
      CHECK(reasoning == c.at("reasoning").as_string());
      if (want_calls.empty())
        CHECK(content == c.at("content").as_string());
      else
        CHECK(content == trim(std::string(c.at("content").as_string())));
      REQUIRE(calls.size() == want_calls.size());
      for (size_t i = 0; i < calls.size(); ++i) {
        CHECK(calls[i].name == want_calls[i].at("name").as_string());
        CHECK(boost::json::parse(calls[i].arguments) == want_calls[i].at("arguments"));
      }
    }
  }
}
