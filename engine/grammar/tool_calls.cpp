#include "engine/grammar/tool_calls.hpp"

#include <algorithm>
#include <stdexcept>
#include <string_view>

namespace inferd::engine::grammar {
namespace {

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

}  // namespace

Grammar tool_calls_grammar(const std::vector<ToolGrammar>& tools, int min_calls, int max_calls) {
  if (tools.empty()) throw std::invalid_argument("tool calls need at least one tool");
  if (tools.size() > static_cast<size_t>(kMaxChoices))
    throw std::invalid_argument("more than " + std::to_string(kMaxChoices) + " tools");
  if (min_calls < 1 || (max_calls >= 0 && max_calls < min_calls))
    throw std::invalid_argument("tool calls need 1 <= min_calls <= max_calls");
  Grammar g;
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
  std::vector<std::string> first, later;
  for (const auto& name : names) {
    const std::string head = std::string(kOpen) + name + std::string(kArguments);
    first.push_back(head);
    later.push_back(std::string(kSeparator) + head);
  }
  Node calls;
  calls.kind = Kind::Repeat;
  calls.items = add(g, tagged(std::move(first), bodies));
  calls.values = add(g, tagged(std::move(later), bodies));
  calls.first = g.nodes[static_cast<size_t>(calls.items)].first;
  calls.min_items = min_calls;
  calls.max_items = max_calls;
  g.root = add(g, std::move(calls));
  return g;
}

}  // namespace inferd::engine::grammar
