// Output parsers: tool calls (hermes) and reasoning (deepseek_r1, qwen3), whole
// and in pieces split at every point, which must agree.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "daemon/reasoning_parser.hpp"
#include "daemon/tool_call_parser.hpp"

using namespace inferd::daemon;

namespace {

ToolCallSplit tools_whole(const std::string& text) {
  HermesToolParser p;
  ToolCallSplit out = p.push(text);
  ToolCallSplit tail = p.finish();
  out.content += tail.content;
  out.calls.insert(out.calls.end(), tail.calls.begin(), tail.calls.end());
  return out;
}

// `text` in pieces cut at `cuts`; every piece's output appended.
ToolCallSplit tools_pieces(const std::string& text, const std::vector<size_t>& cuts, std::string* leaked = nullptr) {
  HermesToolParser p;
  ToolCallSplit out;
  size_t at = 0;
  auto add = [&](ToolCallSplit s) {
    out.content += s.content;
    out.calls.insert(out.calls.end(), s.calls.begin(), s.calls.end());
  };
  for (size_t c : cuts) {
    add(p.push(text.substr(at, c - at)));
    at = c;
  }
  add(p.push(text.substr(at)));
  if (leaked) *leaked = out.content;
  add(p.finish());
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
void check_every_split(const std::string& text, const ToolCallSplit& want) {
  check_same(tools_whole(text), want);
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    CAPTURE(cut);
    std::string early;
    check_same(tools_pieces(text, {cut}, &early), want);
    // Before the end, no piece of a tag ever shows as text.
    CHECK((early.find('<') == std::string::npos || want.content.find('<') != std::string::npos));
  }
  std::vector<size_t> bytes;
  for (size_t i = 1; i < text.size(); ++i) bytes.push_back(i);
  check_same(tools_pieces(text, bytes), want);
}

ReasoningSplit reason(ReasoningFormat f, const std::string& text, const std::vector<size_t>& cuts) {
  ReasoningParser p(f);
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

void check_reasoning(ReasoningFormat f, const std::string& text, const std::string& reasoning,
                     const std::string& content) {
  CAPTURE(text);
  std::vector<std::vector<size_t>> splits{{}};
  for (size_t cut = 0; cut <= text.size(); ++cut) splits.push_back({cut});
  std::vector<size_t> bytes;
  for (size_t i = 1; i < text.size(); ++i) bytes.push_back(i);
  splits.push_back(bytes);
  for (const auto& cuts : splits) {
    const ReasoningSplit r = reason(f, text, cuts);
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
  CHECK_FALSE(known_tool_call_parser("llama3_json"));
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
