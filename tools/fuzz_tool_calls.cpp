// libFuzzer target for the tool-call parsers (hermes, mistral, llama3_json,
// deepseek_v32, deepseek_v4). The first byte picks the parser, the second a cut
// point; the rest is the model's output. Whole, cut in two, and (for short
// outputs) byte by byte, the output must give the same content and calls, and
// every call's arguments must be a JSON object. A difference, anything thrown
// or a crash is a bug.
#include <boost/json/parse.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/tool_call_parser.hpp"

using namespace inferd::daemon;

namespace {

ToolCallSplit run(std::string_view parser, const std::vector<std::string_view>& pieces) {
  auto p = make_tool_call_parser(parser);
  ToolCallSplit out;
  auto add = [&](ToolCallSplit s) {
    out.content += s.content;
    for (auto& c : s.calls) out.calls.push_back(std::move(c));
  };
  for (auto piece : pieces) add(p->push(piece));
  add(p->finish());
  if (p->calls() != static_cast<int>(out.calls.size())) {
    std::fprintf(stderr, "%.*s: calls() says %d, %zu came out\n", int(parser.size()), parser.data(), p->calls(),
                 out.calls.size());
    std::abort();
  }
  return out;
}

void same(std::string_view parser, const ToolCallSplit& a, const ToolCallSplit& b, const char* how) {
  bool ok = a.content == b.content && a.calls.size() == b.calls.size();
  for (size_t i = 0; ok && i < a.calls.size(); ++i)
    ok = a.calls[i].name == b.calls[i].name && a.calls[i].arguments == b.calls[i].arguments;
  if (ok) return;
  std::fprintf(stderr, "%.*s: whole and %s differ: content '%s' vs '%s', %zu vs %zu calls\n", int(parser.size()),
               parser.data(), how, a.content.c_str(), b.content.c_str(), a.calls.size(), b.calls.size());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  static constexpr std::string_view kParsers[] = {"hermes", "mistral", "llama3_json", "deepseek_v32", "deepseek_v4"};
  const std::string_view parser = kParsers[data[0] % std::size(kParsers)];
  const std::string_view text(reinterpret_cast<const char*>(data + 2), size - 2);
  const size_t cut = std::min<size_t>(data[1], text.size());

  const ToolCallSplit whole = run(parser, {text});
  for (const auto& c : whole.calls) {
    boost::system::error_code ec;
    const auto v = boost::json::parse(c.arguments, ec);
    if (ec || !v.is_object() || c.name.empty()) {
      std::fprintf(stderr, "%.*s: call '%s' with arguments '%s'\n", int(parser.size()), parser.data(),
                   c.name.c_str(), c.arguments.c_str());
      std::abort();
    }
  }
  same(parser, whole, run(parser, {text.substr(0, cut), text.substr(cut)}), "cut in two");
  if (text.size() <= 256) {
    std::vector<std::string_view> bytes;
    for (size_t i = 0; i < text.size(); ++i) bytes.push_back(text.substr(i, 1));
    same(parser, whole, run(parser, bytes), "byte by byte");
  }
  return 0;
}
