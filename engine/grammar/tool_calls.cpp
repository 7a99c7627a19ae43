#include "engine/grammar/tool_calls.hpp"

#include <algorithm>
#include <stdexcept>
#include <string_view>

namespace inferd::engine::grammar {
namespace {

constexpr std::string_view kTag = "<tool_call>";
constexpr std::string_view kOpen = "<tool_call>\n{\"name\": \"";
constexpr std::string_view kArguments = "\", \"arguments\": ";
constexpr std::string_view kClose = "}\n</tool_call>";
constexpr std::string_view kSeparator = "\n";

int add(Grammar& g, Node n) {
  g.nodes.push_back(std::move(n));
  return static_cast<int>(g.nodes.size() - 1);
}

// Appends `part`'s nodes to `g`, their indices moved along; returns its root.
int splice(Grammar& g, const Grammar& part) {
  const int base = static_cast<int>(g.nodes.size());
  auto moved = [base](int i) { return i < 0 ? i : i + base; };
  for (Node n : part.nodes) {
    for (auto& p : n.properties) p.value = moved(p.value);
    n.values = moved(n.values);
    n.items = moved(n.items);
    for (int& o : n.options) o = moved(o);
    g.nodes.push_back(std::move(n));
  }
  // Every plain String node is alike: any one serves free-key objects' keys.
  if (g.string_node < 0) g.string_node = moved(part.string_node);
  return moved(part.root);
}

Node literal(std::string_view text) {
  Node n;
  n.kind = Kind::Literals;
  n.first.set(static_cast<uint8_t>(text[0]));
  n.literals = {std::string(text)};
  return n;
}

Node tagged(std::vector<std::string> heads, const std::vector<int>& bodies) {
  Node n;
  n.kind = Kind::Tagged;
  for (const auto& h : heads) n.first.set(static_cast<uint8_t>(h[0]));
  n.literals = std::move(heads);
  n.options = bodies;
  return n;
}

// Each tool's arguments then the block's end, one node per tool (in order),
// after checking the tools as tool_calls_grammar promises.
std::vector<int> call_bodies(Grammar& g, const std::vector<ToolGrammar>& tools) {
  if (tools.empty()) throw std::invalid_argument("tool calls need at least one tool");
  if (tools.size() > static_cast<size_t>(kMaxChoices))
    throw std::invalid_argument("more than " + std::to_string(kMaxChoices) + " tools");
  std::vector<std::string> names;
  std::vector<int> bodies;
  for (const ToolGrammar& t : tools) {
    // Quoted in the head, so distinct names make heads none of which is a prefix of another.
    if (t.name.empty() || std::find(names.begin(), names.end(), t.name) != names.end())
      throw std::invalid_argument("tool names must be non-empty and distinct");
    names.push_back(t.name);
    const int args = splice(g, t.parameters);
    if (g.nodes[static_cast<size_t>(args)].kind != Kind::Object)
      throw std::invalid_argument("the parameters of `" + t.name + "` must describe an object");
    Node body;
    body.kind = Kind::Sequence;
    body.first = g.nodes[static_cast<size_t>(args)].first;
    body.options = {args, add(g, literal(kClose))};
    bodies.push_back(add(g, std::move(body)));
  }
  return bodies;
}

// Each tool's head: what leads to its arguments, after `lead`.
std::vector<std::string> heads(const std::vector<ToolGrammar>& tools, std::string_view lead) {
  std::vector<std::string> out;
  for (const ToolGrammar& t : tools) out.push_back(std::string(lead) + t.name + std::string(kArguments));
  return out;
}

}  // namespace

Grammar tool_calls_grammar(const std::vector<ToolGrammar>& tools, int min_calls, int max_calls) {
  if (min_calls < 1 || (max_calls >= 0 && max_calls < min_calls))
    throw std::invalid_argument("tool calls need 1 <= min_calls <= max_calls");
  Grammar g;
  const std::vector<int> bodies = call_bodies(g, tools);
  Node calls;
  calls.kind = Kind::Repeat;
  calls.items = add(g, tagged(heads(tools, kOpen), bodies));
  calls.values = add(g, tagged(heads(tools, std::string(kSeparator) + std::string(kOpen)), bodies));
  calls.first = g.nodes[static_cast<size_t>(calls.items)].first;
  calls.min_items = min_calls;
  calls.max_items = max_calls;
  g.root = add(g, std::move(calls));
  return g;
}

Grammar tool_calls_in_text_grammar(const std::vector<ToolGrammar>& tools) {
  Grammar g;
  const std::vector<int> bodies = call_bodies(g, tools);
  // text -> tag -> call -> text -> ...: the text node is the root and what follows every call.
  Node text;
  text.kind = Kind::Text;
  text.first.set();
  text.literals = {std::string(kTag)};
  const int root = add(g, std::move(text));
  Node after;
  after.kind = Kind::Sequence;
  after.options = {add(g, tagged(heads(tools, kOpen.substr(kTag.size())), bodies)), root};
  after.first = g.nodes[static_cast<size_t>(after.options[0])].first;
  g.nodes[static_cast<size_t>(root)].options = {add(g, std::move(after))};
  g.root = root;
  return g;
}

}  // namespace inferd::engine::grammar
