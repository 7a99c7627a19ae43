#include "engine/grammar/json_schema.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string_view>

#include <boost/json/serialize.hpp>

namespace inferd::engine::grammar {
namespace {

namespace json = boost::json;

constexpr size_t kMaxNodes = 4096;
constexpr int kMaxNesting = 128;
constexpr int64_t kMaxItemsBound = 100000;

// Words about the schema, not constraints on the value: ignored.
bool annotation(std::string_view k) {
  static const std::set<std::string_view> words = {"title",    "description", "default",    "examples",
                                                   "$schema",  "$id",         "$comment",   "deprecated",
                                                   "readOnly", "writeOnly",   "$defs",      "definitions"};
  return words.count(k) != 0;
}

bool supported(std::string_view k) {
  static const std::set<std::string_view> words = {"type",     "properties", "required", "additionalProperties",
                                                   "items",    "minItems",   "maxItems", "enum",
                                                   "const",    "anyOf",      "oneOf",    "allOf",
                                                   "$ref",     "minLength",  "maxLength"};
  return words.count(k) != 0;
}

std::string join(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}
std::string at(const std::string& path, size_t i) { return path + "[" + std::to_string(i) + "]"; }
std::string tick(std::string_view s) { return "`" + std::string(s) + "`"; }

std::string kind_of(const json::value& v) {
  switch (v.kind()) {
    case json::kind::null: return "null";
    case json::kind::bool_: return "a boolean";
    case json::kind::int64:
    case json::kind::uint64:
    case json::kind::double_: return "a number";
    case json::kind::string: return "a string";
    case json::kind::array: return "an array";
    case json::kind::object: return "an object";
  }
  return "?";
}

Node make(Kind k) {
  Node n;
  n.kind = k;
  return n;
}

const json::value* find(const json::object& o, std::string_view key) {
  auto it = o.find(key);
  return it == o.end() ? nullptr : &it->value();
}

bool integral(const json::value& v) {
  return v.is_int64() || v.is_uint64() || (v.is_double() && std::isfinite(v.get_double()) && v.get_double() == std::floor(v.get_double()));
}

// Whether a JSON value is of a JSON Schema type.
bool of_type(const json::value& v, std::string_view type) {
  if (type == "string") return v.is_string();
  if (type == "number") return v.is_number();
  if (type == "integer") return v.is_number() && integral(v);
  if (type == "boolean") return v.is_bool();
  if (type == "null") return v.is_null();
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  return false;
}

class Compiler {
 public:
  Compiler(const json::value& root, bool strict) : root_(root), strict_(strict) {}

  Grammar finish(int root) {
    settle_unions();
    require_finite_values();
    g_.root = root;
    g_.string_node = string_node();
    return std::move(g_);
  }

  int compile(const json::value& s, const std::string& path, int depth) {
    // Schemas within schemas (anyOf, allOf, chains of $ref) recurse here too: bounded.
    struct Level {
      int& n;
      explicit Level(int& n) : n(n) { ++n; }
      ~Level() { --n; }
    } level(nesting_);
    if (nesting_ > kMaxNesting) throw SchemaError(path, "the schema nests or refers deeper than " +
                                                            std::to_string(kMaxNesting) + " levels");
    if (depth > kMaxDepth - 2)
      throw SchemaError(path, "the schema nests deeper than " + std::to_string(kMaxDepth - 2) + " levels");
    if (s.is_bool()) {
      if (s.get_bool()) return any();
      throw SchemaError(path, "the schema `false` accepts no value");
    }
    if (!s.is_object()) throw SchemaError(path, "a schema must be an object, got " + kind_of(s));
    const json::object& o = s.get_object();
    for (const auto& kv : o)
      if (!supported(kv.key()) && !annotation(kv.key()))
        throw SchemaError(join(path, kv.key()), "the keyword " + tick(kv.key()) +
                                                    " is not supported in a schema for constrained decoding; supported: type, "
                                                    "properties, required, additionalProperties, items, minItems, "
                                                    "maxItems, minLength, maxLength, enum, const, anyOf, oneOf, "
                                                    "allOf (one schema), $ref");
    if (find(o, "$ref")) return ref(o, path, depth);
    if (const json::value* a = find(o, "allOf")) {
      alone(o, path, "allOf");
      if (!a->is_array() || a->get_array().size() != 1)
        throw SchemaError(join(path, "allOf"), "`allOf` is supported only with exactly one schema");
      return compile(a->get_array()[0], at(join(path, "allOf"), 0), depth);
    }
    for (std::string_view k : {"anyOf", "oneOf"})
      if (const json::value* a = find(o, k)) {
        alone(o, path, k);
        const std::string p = join(path, k);
        if (!a->is_array() || a->get_array().empty())
          throw SchemaError(p, tick(k) + " must be a non-empty array of schemas");
        std::vector<int> options;
        for (size_t i = 0; i < a->get_array().size(); ++i) options.push_back(compile(a->get_array()[i], at(p, i), depth));
        return make_union(std::move(options), p);
      }
    if (find(o, "enum") || find(o, "const")) return literals(o, path);

    const json::value* t = find(o, "type");
    if (t && t->is_array()) {
      const std::string p = join(path, "type");
      if (t->get_array().empty()) throw SchemaError(p, "`type` must not be an empty array");
      std::vector<int> options;
      for (size_t i = 0; i < t->get_array().size(); ++i) {
        const json::value& name = t->get_array()[i];
        if (!name.is_string()) throw SchemaError(at(p, i), "a type name must be a string, got " + kind_of(name));
        options.push_back(of(name.get_string(), o, path, depth));
      }
      return make_union(std::move(options), p);
    }
    if (t && !t->is_string()) throw SchemaError(join(path, "type"), "`type` must be a string or an array of strings");
    if (t) return of(t->get_string(), o, path, depth);
    // No type: what the other keywords imply, else any value.
    if (find(o, "properties") || find(o, "required") || find(o, "additionalProperties")) return of("object", o, path, depth);
    if (find(o, "items") || find(o, "minItems") || find(o, "maxItems")) return of("array", o, path, depth);
    return any();
  }

  // Any JSON value: built once, on first use.
  int any() {
    if (any_ >= 0) return any_;
    Node obj = make(Kind::Object);
    obj.first.set('{');
    const int o = add(obj);
    Node arr = make(Kind::Array);
    arr.first.set('[');
    const int a = add(arr);
    const int s = string_node();
    const int n = number(Kind::Number);
    const int l = literal_node({"true", "false", "null"});
    Node u = make(Kind::Union);
    u.options = {o, a, s, n, l};
    for (int x : u.options) u.first |= g_.nodes[static_cast<size_t>(x)].first;
    any_ = add(u);
    g_.nodes[static_cast<size_t>(o)].values = any_;
    g_.nodes[static_cast<size_t>(a)].items = any_;
    return any_;
  }

 private:
  int add(Node n) {
    if (g_.nodes.size() >= kMaxNodes)
      throw SchemaError("", "the schema is too large (more than " + std::to_string(kMaxNodes) + " parts)");
    g_.nodes.push_back(std::move(n));
    return static_cast<int>(g_.nodes.size() - 1);
  }

  int string_node() {
    if (string_ < 0) {
      Node n = make(Kind::String);
      n.first.set('"');
      string_ = add(n);
    }
    return string_;
  }

  int number(Kind k) {
    Node n = make(k);
    n.first.set('-');
    for (char c = '0'; c <= '9'; ++c) n.first.set(static_cast<uint8_t>(c));
    return add(n);
  }

  int literal_node(std::vector<std::string> texts) {
    Node n = make(Kind::Literals);
    for (const auto& t : texts) n.first.set(static_cast<uint8_t>(t[0]));
    n.literals = std::move(texts);
    return add(n);
  }

  // `keyword` allows only annotations beside it.
  static void alone(const json::object& o, const std::string& path, std::string_view keyword) {
    for (const auto& kv : o)
      if (kv.key() != keyword && !annotation(kv.key()))
        throw SchemaError(join(path, kv.key()), tick(kv.key()) + " beside " + tick(keyword) + " is not supported");
  }

  int of(std::string_view type, const json::object& o, const std::string& path, int depth) {
    if (type == "object") return object(o, path, depth);
    if (type == "array") return array(o, path, depth);
    if (type == "string") return string(o, path);
    if (type == "number") return number(Kind::Number);
    if (type == "integer") return number(Kind::Integer);
    if (type == "boolean") return literal_node({"true", "false"});
    if (type == "null") return literal_node({"null"});
    throw SchemaError(join(path, "type"), "unknown type " + tick(type) +
                                              "; expected object, array, string, number, integer, boolean or null");
  }

  int object(const json::object& o, const std::string& path, int depth) {
    Node n = make(Kind::Object);
    n.first.set('{');
    n.ordered = strict_;
    const json::value* props = find(o, "properties");
    if (props && !props->is_object())
      throw SchemaError(join(path, "properties"), "`properties` must be an object, got " + kind_of(*props));
    if (props) {
      if (props->get_object().size() > static_cast<size_t>(kMaxChoices))
        throw SchemaError(join(path, "properties"), "more than " + std::to_string(kMaxChoices) + " properties");
      for (const auto& kv : props->get_object()) {
        Property p;
        p.key = json::serialize(json::string(kv.key()));
        p.value = compile(kv.value(), join(join(path, "properties"), kv.key()), depth + 1);
        n.properties.push_back(std::move(p));
      }
    }
    if (const json::value* req = find(o, "required")) {
      const std::string p = join(path, "required");
      if (!req->is_array()) throw SchemaError(p, "`required` must be an array of property names");
      for (size_t i = 0; i < req->get_array().size(); ++i) {
        const json::value& name = req->get_array()[i];
        if (!name.is_string()) throw SchemaError(at(p, i), "a property name must be a string, got " + kind_of(name));
        const std::string key = json::serialize(name);
        auto it = std::find_if(n.properties.begin(), n.properties.end(), [&](const Property& x) { return x.key == key; });
        if (it == n.properties.end())
          throw SchemaError(at(p, i), "required property " + tick(name.get_string()) + " is not among `properties`");
        it->required = true;
        n.required |= uint64_t{1} << (it - n.properties.begin());
      }
    }
    const json::value* extra = find(o, "additionalProperties");
    const std::string ep = join(path, "additionalProperties");
    if (extra && !extra->is_bool() && !extra->is_object())
      throw SchemaError(ep, "`additionalProperties` must be a boolean or a schema, got " + kind_of(*extra));
    // With declared properties no others are written, which any additionalProperties allows.
    if (n.properties.empty()) {
      if (!extra || (extra->is_bool() && extra->get_bool())) n.values = any();
      else if (extra->is_object()) n.values = compile(*extra, ep, depth + 1);
    }
    return add(std::move(n));
  }

  // Lengths in characters, as JSON Schema counts them; maxLength past the
  // grammar's bound is that bound (a subset of what the schema allows).
  int string(const json::object& o, const std::string& path) {
    const json::value* lo = find(o, "minLength");
    const json::value* hi = find(o, "maxLength");
    if (!lo && !hi) return string_node();
    auto length = [&](const json::value* v, std::string_view key, int fallback) {
      if (!v) return fallback;
      if (!integral(*v) || v->to_number<double>() < 0)
        throw SchemaError(join(path, key), tick(key) + " must be a non-negative integer");
      return static_cast<int>(std::min<double>(v->to_number<double>(), kMaxStringLength));
    };
    Node n = make(Kind::String);
    n.first.set('"');
    n.min_length = length(lo, "minLength", 0);
    if (lo && lo->to_number<double>() > kMaxStringLength)
      throw SchemaError(join(path, "minLength"), "`minLength` above " + std::to_string(kMaxStringLength) +
                                                     " is not supported");
    n.max_length = length(hi, "maxLength", kMaxStringLength);
    if (n.max_length < n.min_length) throw SchemaError(join(path, "maxLength"), "`maxLength` is less than `minLength`");
    return add(std::move(n));
  }

  int array(const json::object& o, const std::string& path, int depth) {
    Node n = make(Kind::Array);
    n.first.set('[');
    const json::value* items = find(o, "items");
    if (items && items->is_array())
      throw SchemaError(join(path, "items"), "`items` as an array (a tuple) is not supported; use one schema");
    n.items = items ? compile(*items, join(path, "items"), depth + 1) : any();
    auto bound = [&](std::string_view key, int64_t fallback) {
      const json::value* v = find(o, key);
      if (!v) return fallback;
      if (!integral(*v) || v->to_number<double>() < 0 || v->to_number<double>() > kMaxItemsBound)
        throw SchemaError(join(path, key), tick(key) + " must be an integer from 0 to " + std::to_string(kMaxItemsBound));
      return static_cast<int64_t>(v->to_number<double>());
    };
    n.min_items = static_cast<int>(bound("minItems", 0));
    n.max_items = static_cast<int>(bound("maxItems", -1));
    if (n.max_items >= 0 && n.max_items < n.min_items)
      throw SchemaError(join(path, "maxItems"), "`maxItems` is less than `minItems`");
    return add(std::move(n));
  }

  int literals(const json::object& o, const std::string& path) {
    std::vector<const json::value*> values;
    std::string p;
    if (const json::value* c = find(o, "const")) {
      values.push_back(c);
      p = join(path, "const");
    } else {
      p = join(path, "enum");
      const json::value* e = find(o, "enum");
      if (!e->is_array() || e->get_array().empty()) throw SchemaError(p, "`enum` must be a non-empty array");
      for (const auto& v : e->get_array()) values.push_back(&v);
    }
    // With `type` beside, only values of that type are written.
    if (const json::value* t = find(o, "type")) {
      std::vector<std::string_view> types;
      if (t->is_string()) types.push_back(t->get_string());
      if (t->is_array())
        for (const auto& x : t->get_array())
          if (x.is_string()) types.push_back(x.get_string());
      std::erase_if(values, [&](const json::value* v) {
        return std::none_of(types.begin(), types.end(), [&](std::string_view ty) { return of_type(*v, ty); });
      });
      if (values.empty()) throw SchemaError(p, "no value of " + tick(p) + " is of the schema's `type`");
    }
    std::vector<std::string> texts;
    for (const json::value* v : values) {
      std::string text = json::serialize(*v);
      if (std::find(texts.begin(), texts.end(), text) == texts.end()) texts.push_back(std::move(text));
    }
    if (texts.size() > static_cast<size_t>(kMaxChoices))
      throw SchemaError(p, "more than " + std::to_string(kMaxChoices) + " values");
    return literal_node(std::move(texts));
  }

  // A union's first bytes come from its options; where an option is a $ref
  // being compiled, only once it is filled: so they are settled at the end, to
  // a fixed point (unions of unions), and the options checked again.
  void settle_unions() {
    for (size_t round = 0, changed = 1; changed && round <= g_.nodes.size(); ++round) {
      changed = 0;
      for (auto& n : g_.nodes) {
        if (n.kind != Kind::Union) continue;
        std::bitset<256> first;
        for (int o : n.options) first |= g_.nodes[static_cast<size_t>(o)].first;
        if (first != n.first) n.first = first, changed = 1;
      }
    }
    for (size_t i = 0; i < g_.nodes.size(); ++i)
      if (g_.nodes[i].kind == Kind::Union) {
        auto it = union_paths_.find(static_cast<int>(i));
        check_disjoint(g_.nodes[i].options, it == union_paths_.end() ? std::string() : it->second);
      }
  }

  // Every node must have a finite value, or generation could only stop at the
  // depth bound, mid-value (e.g. a required property that refers back to itself).
  void require_finite_values() {
    std::vector<char> finite(g_.nodes.size(), 0);
    auto ok = [&](int x) { return finite[static_cast<size_t>(x)] != 0; };
    for (size_t round = 0, changed = 1; changed && round <= g_.nodes.size(); ++round) {
      changed = 0;
      for (size_t i = 0; i < g_.nodes.size(); ++i) {
        if (finite[i]) continue;
        const Node& n = g_.nodes[i];
        bool f = true;
        if (n.kind == Kind::Object) {
          for (const auto& p : n.properties) f = f && (!p.required || ok(p.value));
        } else if (n.kind == Kind::Array) {
          f = n.min_items == 0 || ok(n.items);
        } else if (n.kind == Kind::Union) {
          f = std::any_of(n.options.begin(), n.options.end(), ok);
        }
        if (f) finite[i] = 1, changed = 1;
      }
    }
    if (std::find(finite.begin(), finite.end(), 0) != finite.end())
      throw SchemaError("", "the schema has a part with no finite value (e.g. a required property that refers back "
                            "to the object it is in)");
  }

  void check_disjoint(const std::vector<int>& options, const std::string& path) const {
    for (size_t i = 0; i < options.size(); ++i) {
      const auto& fi = g_.nodes[static_cast<size_t>(options[i])].first;
      for (size_t j = 0; j < i; ++j) {
        const auto both = fi & g_.nodes[static_cast<size_t>(options[j])].first;
        if (both.any()) {
          size_t c = 0;
          while (!both[c]) ++c;
          throw SchemaError(path, "options " + std::to_string(j) + " and " + std::to_string(i) +
                                      " can both begin with `" + std::string(1, static_cast<char>(c)) +
                                      "`; the options of a union must differ in how they begin (e.g. in type)");
        }
      }
    }
  }

  // The options of a union must begin with different bytes: the automaton picks
  // one by the first byte and never backtracks. Integer beside number is number.
  int make_union(std::vector<int> options, const std::string& path) {
    auto kind = [&](int x) { return g_.nodes[static_cast<size_t>(x)].kind; };
    if (std::any_of(options.begin(), options.end(), [&](int x) { return kind(x) == Kind::Number; }))
      std::erase_if(options, [&](int x) { return kind(x) == Kind::Integer; });
    if (options.size() == 1) return options[0];
    check_disjoint(options, path);
    Node u = make(Kind::Union);
    for (int o : options) u.first |= g_.nodes[static_cast<size_t>(o)].first;
    u.options = std::move(options);
    const int node = add(std::move(u));
    union_paths_[node] = path;
    return node;
  }

  int ref(const json::object& o, const std::string& path, int depth) {
    alone(o, path, "$ref");
    const std::string p = join(path, "$ref");
    const json::value& r = *find(o, "$ref");
    if (!r.is_string()) throw SchemaError(p, "`$ref` must be a string");
    const std::string target(r.get_string());
    if (auto it = done_.find(target); it != done_.end()) return it->second;
    if (target.empty() || target[0] != '#')
      throw SchemaError(p, "only references within the schema (\"#/...\") are supported, got " + tick(target));
    // A JSON pointer: "/"-separated, "~1" for '/', "~0" for '~'.
    const json::value* v = &root_;
    std::string where;
    size_t pos = 1;
    while (pos < target.size()) {
      if (target[pos] != '/') throw SchemaError(p, tick(target) + " is not a JSON pointer");
      const size_t end = std::min(target.find('/', pos + 1), target.size());
      std::string token = target.substr(pos + 1, end - pos - 1);
      for (size_t k; (k = token.find("~1")) != std::string::npos;) token.replace(k, 2, "/");
      for (size_t k; (k = token.find("~0")) != std::string::npos;) token.replace(k, 2, "~");
      const json::value* next = v->is_object() ? find(v->get_object(), token) : nullptr;
      if (!next) throw SchemaError(p, tick(target) + " does not resolve within the schema");
      v = next;
      where = join(where, token);
      pos = end;
    }
    // The target's node goes in a slot taken first, so a $ref back to it from
    // within (a tree, a list) is an index like any other: recursion in the data.
    const int slot = add(make(Kind::Union));
    done_[target] = slot;
    const int node = compile(*v, where, depth);
    g_.nodes[static_cast<size_t>(slot)] = g_.nodes[static_cast<size_t>(node)];
    if (auto it = union_paths_.find(node); it != union_paths_.end()) union_paths_[slot] = it->second;
    return slot;
  }

  const json::value& root_;
  bool strict_;
  Grammar g_;
  int any_ = -1, string_ = -1;
  int nesting_ = 0;  // compile() calls in progress
  std::map<std::string, int> done_;         // $ref targets: their nodes' slots
  std::map<int, std::string> union_paths_;  // where each union was declared
};

}  // namespace

Grammar compile_json_schema(const json::value& schema, bool strict) {
  Compiler c(schema, strict);
  const int root = c.compile(schema, "", 0);
  return c.finish(root);
}

Grammar any_json_object() {
  const json::value schema = json::object{{"type", "object"}};
  return compile_json_schema(schema, false);
}

}  // namespace inferd::engine::grammar
