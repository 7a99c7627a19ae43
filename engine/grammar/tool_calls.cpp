#include "engine/grammar/tool_calls.hpp"

#include <boost/json.hpp>

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

// ---- DSML -------------------------------------------------------------------------

constexpr std::string_view kParamClose = "</｜DSML｜parameter>\n";
constexpr std::string_view kInvokeClose = "</｜DSML｜invoke>\n";

// The text of a JSON string literal ("\"city\"" -> city).
std::string unquoted(const std::string& json_text) {
  return std::string(boost::json::parse(json_text).as_string());
}

// What may follow once parameters before `i` are written (or skipped): any
// later parameter whose earlier ones are all optional, or the invoke's end when
// all the rest are. Nodes are made back to front, so each refers to later ones.
int dsml_parameters(Grammar& g, int args_node) {
  // Copies: adding nodes below moves g.nodes.
  const std::vector<Property> props = g.nodes[static_cast<size_t>(args_node)].properties;
  if (props.empty() && g.nodes[static_cast<size_t>(args_node)].values >= 0)
    throw std::invalid_argument("DSML parameters cannot hold an object with free keys");
  Node empty;  // nothing: the frame passes the byte on
  empty.kind = Kind::Sequence;
  const int none = add(g, std::move(empty));
  std::vector<int> next(props.size() + 1);
  next[props.size()] = add(g, tagged({std::string(kInvokeClose)}, {none}));
  for (size_t i = props.size(); i-- > 0;) {
    std::vector<std::string> heads;
    std::vector<int> bodies;
    for (size_t j = i; j < props.size(); ++j) {
      const std::string name = unquoted(props[j].key);
      if (name.find_first_of("\"<>\n\r") != std::string::npos)
        throw std::invalid_argument("parameter name `" + name + "` cannot be written as a DSML attribute");
      const Node value = g.nodes[static_cast<size_t>(props[j].value)];
      const bool all_strings =
          value.kind == Kind::Literals &&
          std::all_of(value.literals.begin(), value.literals.end(), [](const std::string& l) { return l[0] == '"'; });
      const std::string head = "<｜DSML｜parameter name=\"" + name + "\" string=\"";
      int body;
      if (value.kind == Kind::String) {
        // Raw text up to the closing tag, then the rest.
        Node text;
        text.kind = Kind::Text;
        text.first.set();
        text.literals = {std::string(kParamClose.substr(0, kParamClose.size() - 1))};
        Node rest;
        rest.kind = Kind::Sequence;
        rest.first.set('\n');
        rest.options = {add(g, literal("\n")), next[j + 1]};
        text.options = {add(g, std::move(rest))};
        heads.push_back(head + "true\">");
        body = add(g, std::move(text));
      } else if (all_strings) {
        // One of the enum's values, raw, with the closing tag (so no value is a prefix of another's head).
        Node values;
        values.kind = Kind::Literals;
        for (const std::string& l : value.literals) {
          values.literals.push_back(unquoted(l) + std::string(kParamClose));
          values.first.set(static_cast<uint8_t>(values.literals.back()[0]));
        }
        Node seq;
        seq.kind = Kind::Sequence;
        seq.first = values.first;
        seq.options = {add(g, std::move(values)), next[j + 1]};
        heads.push_back(head + "true\">");
        body = add(g, std::move(seq));
      } else {
        Node seq;
        seq.kind = Kind::Sequence;
        seq.first = value.first;
        seq.options = {props[j].value, add(g, literal(kParamClose)), next[j + 1]};
        heads.push_back(head + "false\">");
        body = add(g, std::move(seq));
      }
      bodies.push_back(body);
      if (props[j].required) break;  // a required parameter cannot be skipped
    }
    const bool rest_optional =
        std::none_of(props.begin() + static_cast<std::ptrdiff_t>(i), props.end(), [](const Property& p) { return p.required; });
    if (rest_optional) {
      heads.push_back(std::string(kInvokeClose));
      bodies.push_back(none);
    }
    next[i] = add(g, tagged(std::move(heads), bodies));
  }
  return next[0];
}

}  // namespace

Grammar dsml_tool_calls_grammar(const std::vector<ToolGrammar>& tools, int max_calls, const std::string& block) {
  if (max_calls != 1 && max_calls != -1) throw std::invalid_argument("DSML tool calls take max_calls 1 or -1");
  if (tools.empty()) throw std::invalid_argument("tool calls need at least one tool");
  if (tools.size() > static_cast<size_t>(kMaxChoices))
    throw std::invalid_argument("more than " + std::to_string(kMaxChoices) + " tools");
  Grammar g;
  std::vector<std::string> heads;
  std::vector<int> params;
  for (const ToolGrammar& t : tools) {
    if (t.name.empty() || t.name.find_first_of("\"<>\n\r") != std::string::npos ||
        std::any_of(tools.begin(), tools.end(), [&](const ToolGrammar& o) { return &o != &t && o.name == t.name; }))
      throw std::invalid_argument("tool names must be non-empty, distinct and without quotes, brackets or line breaks");
    const int args = splice(g, t.parameters);
    if (g.nodes[static_cast<size_t>(args)].kind != Kind::Object)
      throw std::invalid_argument("the parameters of `" + t.name + "` must describe an object");
    heads.push_back("<｜DSML｜invoke name=\"" + t.name + "\">\n");
    params.push_back(dsml_parameters(g, args));
  }
  const std::string close = "</｜DSML｜" + block + ">";
  // After a call: another one (unless only one is allowed) or the block's end.
  const int after = max_calls == 1 ? add(g, literal(close)) : add(g, Node{});
  std::vector<int> calls;
  for (int p : params) {
    Node seq;
    seq.kind = Kind::Sequence;
    seq.first = g.nodes[static_cast<size_t>(p)].first;
    seq.options = {p, after};
    calls.push_back(add(g, std::move(seq)));
  }
  if (max_calls != 1) {
    std::vector<std::string> more = heads;
    std::vector<int> bodies = calls;
    more.push_back(close);
    Node end;
    end.kind = Kind::Sequence;
    bodies.push_back(add(g, std::move(end)));
    g.nodes[static_cast<size_t>(after)] = tagged(std::move(more), bodies);
  }
  Node root;
  root.kind = Kind::Sequence;
  root.options = {add(g, literal("<｜DSML｜" + block + ">\n")), add(g, tagged(heads, calls))};
  root.first.set(static_cast<uint8_t>('<'));
  g.root = add(g, std::move(root));
  // A JSON value's strings must not close the parameter early: no raw '<' in them.
  for (Node& n : g.nodes)
    if (n.kind == Kind::String) n.no_angle = true;
  return g;
}

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
