#include "engine/jinja/builtins.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace inferd::engine::jinja {

namespace {

constexpr std::string_view kSpace = " \t\n\r\f\v";

[[noreturn]] void fail(const std::string& what) { throw RenderError(what); }

// An indentation width: a prompt's is a few spaces, so anything past 1000 (or
// below 0, or not a number) is refused rather than allocated.
size_t width_of(const Value& w, const char* what) {
  const double d = w.is_number() ? w.number() : -1.0;
  if (!(d >= 0 && d <= 1000)) fail(std::string(what) + " must be a number from 0 to 1000");
  return size_t(d);
}

bool any_of(std::string_view name, std::initializer_list<std::string_view> names) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

const Value* arg(Call& c, size_t i, std::string_view key) {
  if (i < c.args.size()) return &c.args[i];
  for (auto& [k, v] : c.kwargs)
    if (k == key) return &v;
  return nullptr;
}

const Text& need_string(const Value& v, std::string_view what) {
  if (!v.is_string()) fail(std::string(what) + " needs a string, got " + type_name(v));
  return v.text();
}

std::string string_arg(Call& c, size_t i, std::string_view key, std::string_view what) {
  const Value* v = arg(c, i, key);
  if (!v) fail(std::string(what) + ": missing argument '" + std::string(key) + "'");
  return need_string(*v, what).str;
}

// Python's str.strip(chars) family; chars empty: whitespace.
Text strip(const Text& t, bool left, bool right, std::string_view chars = kSpace) {
  size_t b = 0, e = t.str.size();
  if (left) while (b < e && chars.find(t.str[b]) != std::string_view::npos) ++b;
  if (right) while (e > b && chars.find(t.str[e - 1]) != std::string_view::npos) --e;
  return t.substr(b, e - b);
}

Text replace(const Text& t, std::string_view from, std::string_view to, int64_t count = -1) {
  if (from.empty()) fail("replace() with an empty pattern is not supported");
  Text out;
  size_t at = 0;
  for (size_t hit; count != 0 && (hit = t.str.find(from, at)) != std::string::npos; --count) {
    out.append(t.substr(at, hit - at));
    out.append(t.substr(hit, from.size()).rewritten(std::string(to)));  // marked where the match was
    at = hit + from.size();
  }
  out.append(t.substr(at));
  return out;
}

List split(const Text& t, const Value* sep, int64_t max) {
  List out;
  if (!sep || sep->is_none()) {  // runs of whitespace, none at the ends
    size_t at = t.str.find_first_not_of(kSpace);
    while (at != std::string::npos) {
      size_t end = max-- == 0 ? std::string::npos : t.str.find_first_of(kSpace, at);
      if (end == std::string::npos) {
        out.emplace_back(strip(t.substr(at), false, true));
        break;
      }
      out.emplace_back(t.substr(at, end - at));
      at = t.str.find_first_not_of(kSpace, end);
    }
    return out;
  }
  const std::string& s = need_string(*sep, "split()").str;
  if (s.empty()) fail("split(): empty separator");
  size_t at = 0;
  for (size_t hit; max-- != 0 && (hit = t.str.find(s, at)) != std::string::npos; at = hit + s.size())
    out.emplace_back(t.substr(at, hit - at));
  out.emplace_back(t.substr(at));
  return out;
}

Text case_map(const Text& t, int mode) {  // 0 lower, 1 upper, 2 capitalize, 3 title (ASCII letters)
  std::string s = t.str;
  bool word_start = true;
  for (size_t i = 0; i < s.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    const bool upper = mode == 1 || (mode == 2 && i == 0) || (mode == 3 && word_start);
    s[i] = char(upper ? std::toupper(c) : std::tolower(c));
    word_start = !std::isalpha(c);
  }
  return t.rewritten(std::move(s));
}

int64_t length(const Value& v) {
  if (v.is_string()) return int64_t(code_point_offsets(v.str()).size() - 1);
  if (v.is_list()) return int64_t(v.list().size());
  if (v.is_dict()) return int64_t(v.dict().size());
  if (v.is_undefined()) return 0;
  fail("object of type '" + type_name(v) + "' has no len()");
}

Value attribute(const Value& v, const std::string& name) {
  Value out = v.get(name);
  if (out.is_undefined() && v.is_list() && !name.empty() &&
      name.find_first_not_of("0123456789") == std::string::npos) {
    size_t i = 0;
    const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), i);
    if (ec == std::errc() && i < v.list().size()) return v.list()[i];  // too large: undefined
  }
  return out;
}

Value sequence(const Value& v) {
  List out;
  for (Value& x : iterate(v)) out.push_back(std::move(x));
  return out;
}

// selectattr/rejectattr/select/reject: the items whose (attribute's) test is `keep`.
Value select(const Value& subject, Call& c, bool by_attribute, bool keep) {
  const size_t first = by_attribute ? 1 : 0;
  std::string attr = by_attribute ? string_arg(c, 0, "attribute", "selectattr") : "";
  std::string test = c.args.size() > first ? need_string(c.args[first], "test name").str : "";
  if (!test.empty() && !has_test(test)) fail("test '" + test + "' is not supported");
  Call rest;
  rest.args.assign(c.args.begin() + std::min(c.args.size(), first + 1), c.args.end());
  List out;
  for (const Value& x : iterate(subject)) {
    const Value y = by_attribute ? attribute(x, attr) : x;
    const bool pass = test.empty() ? truthy(y) : apply_test(test, y, rest);
    if (pass == keep) out.push_back(x);
  }
  return out;
}

Value dict_items(const Value& d) {
  if (!d.is_dict()) fail("items() needs a mapping, got " + type_name(d));
  List out;
  for (const auto& [k, v] : d.dict()) {
    Value pair = List{d.from_request ? Value(Text::request(k)) : Value(k), v};
    pair.is_tuple = true;
    out.push_back(std::move(pair));
  }
  return out;
}

}  // namespace

bool has_filter(std::string_view n) {
  return any_of(n, {"trim", "length", "count", "tojson", "upper", "lower", "capitalize", "title", "default", "d",
                    "join", "first", "last", "string", "items", "list", "replace", "safe", "int", "float", "abs",
                    "map", "select", "reject", "selectattr", "rejectattr", "reverse", "indent", "dictsort"});
}

bool has_test(std::string_view n) {
  return any_of(n, {"defined", "undefined", "none", "string", "mapping", "iterable", "sequence", "number", "integer",
                    "float", "boolean", "true", "false", "callable", "even", "odd", "divisibleby", "equalto", "eq",
                    "ne", "lt", "gt", "le", "ge", "sameas", "in", "lower", "upper"});
}

bool has_method(std::string_view n) {
  return any_of(n, {"startswith", "endswith", "strip", "lstrip", "rstrip", "split", "replace", "upper", "lower",
                    "title", "capitalize", "find", "items", "keys", "values", "get"});
}

bool has_global(std::string_view n) { return any_of(n, {"raise_exception", "strftime_now", "namespace", "range"}); }

List iterate(const Value& v) {
  if (v.is_list()) return v.list();
  if (v.is_undefined()) return {};
  if (v.is_dict()) {
    List out;
    for (const auto& [k, x] : v.dict()) out.push_back(v.from_request ? Value(Text::request(k)) : Value(k));
    return out;
  }
  if (v.is_string()) {
    const auto at = code_point_offsets(v.str());
    List out;
    for (size_t i = 0; i + 1 < at.size(); ++i) out.push_back(v.text().substr(at[i], at[i + 1] - at[i]));
    return out;
  }
  fail("'" + type_name(v) + "' object is not iterable");
}

Value apply_filter(std::string_view n, const Value& v, Call& c) {
  if (n == "default" || n == "d") {
    const Value* otherwise = arg(c, 0, "default_value");
    const Value* boolean = arg(c, 1, "boolean");
    const bool use = v.is_undefined() || (boolean && truthy(*boolean) && !truthy(v));
    return use ? (otherwise ? *otherwise : Value(std::string())) : v;
  }
  if (n == "length" || n == "count") return length(v);
  if (n == "string") return to_text(v);
  if (n == "safe") return v;
  if (n == "tojson") {
    const Value* indent = arg(c, 0, "indent");
    return to_json(v, indent && indent->is_int() ? int(width_of(*indent, "tojson indent")) : -1);
  }
  if (n == "list") return sequence(v);
  if (n == "first" || n == "last") {
    List items = iterate(v);
    if (items.empty()) return Value::undefined(std::string(n));
    return n == "first" ? items.front() : items.back();
  }
  if (n == "reverse") {
    if (v.is_string()) {
      List chars = iterate(v);
      Text out;
      for (auto it = chars.rbegin(); it != chars.rend(); ++it) out.append(it->text());
      return out;
    }
    List items = iterate(v);
    std::reverse(items.begin(), items.end());
    return items;
  }
  if (n == "join") {
    const Value* sep = arg(c, 0, "d");
    const Value* attr = arg(c, 1, "attribute");
    Text out;
    bool first = true;
    for (const Value& x : iterate(v)) {
      if (!first && sep) out.append(to_text(*sep));
      first = false;
      out.append(to_text(attr ? attribute(x, need_string(*attr, "join attribute").str) : x));
    }
    return out;
  }
  if (n == "items") return dict_items(v);
  if (n == "dictsort") {
    List items = dict_items(v).list();
    std::stable_sort(items.begin(), items.end(),
                     [](const Value& a, const Value& b) { return a.list()[0].str() < b.list()[0].str(); });
    return items;
  }
  if (n == "map") {
    const Value* attr = arg(c, 99, "attribute");
    List out;
    if (attr) {
      const std::string name = need_string(*attr, "map attribute").str;
      for (const Value& x : iterate(v)) out.push_back(attribute(x, name));
      return out;
    }
    const std::string filter = string_arg(c, 0, "filter", "map");
    if (!has_filter(filter) || filter == "map") fail("map: filter '" + filter + "' is not supported");
    Call rest;
    rest.args.assign(c.args.begin() + 1, c.args.end());
    for (const Value& x : iterate(v)) out.push_back(apply_filter(filter, x, rest));
    return out;
  }
  if (n == "select" || n == "reject") return select(v, c, false, n == "select");
  if (n == "selectattr" || n == "rejectattr") return select(v, c, true, n == "selectattr");
  if (n == "int") {
    if (v.is_int()) return v;
    if (v.is_float()) {  // jinja2: infinity and NaN give the default, 0
      const double d = std::trunc(v.number());
      if (!std::isfinite(d)) return int64_t{0};
      if (!(d >= -0x1p63 && d < 0x1p63)) fail("integer overflow");
      return static_cast<int64_t>(d);
    }
    if (v.is_string()) return static_cast<int64_t>(std::strtoll(v.str().c_str(), nullptr, 10));  // saturates
    return int64_t{0};
  }
  if (n == "float") {
    if (v.is_number()) return v.number();
    if (v.is_string()) return std::strtod(v.str().c_str(), nullptr);
    return 0.0;
  }
  if (n == "abs") {
    if (v.is_int()) {
      if (std::get<int64_t>(v.v) == std::numeric_limits<int64_t>::min()) fail("integer overflow");
      return std::abs(std::get<int64_t>(v.v));
    }
    if (v.is_float()) return std::fabs(v.number());
    fail("abs needs a number, got " + type_name(v));
  }
  // The rest work on text: Jinja2 makes a string of what they are given.
  const Text t = to_text(v);
  if (n == "trim") {
    const Value* chars = arg(c, 0, "chars");
    return chars && !chars->is_none() ? strip(t, true, true, need_string(*chars, "trim").str) : strip(t, true, true);
  }
  if (n == "upper") return case_map(t, 1);
  if (n == "lower") return case_map(t, 0);
  if (n == "capitalize") return case_map(t, 2);
  if (n == "title") return case_map(t, 3);
  if (n == "replace") {
    const Value* count = arg(c, 2, "count");
    return replace(t, string_arg(c, 0, "old", "replace"), string_arg(c, 1, "new", "replace"),
                   count && count->is_int() ? std::get<int64_t>(count->v) : -1);
  }
  if (n == "indent") {
    const Value* width = arg(c, 0, "width");
    const Value* first = arg(c, 1, "first");
    const std::string pad = width && width->is_string() ? width->str()
                                                        : std::string(width ? width_of(*width, "indent width") : 4, ' ');
    Text out;
    size_t at = 0;
    bool first_line = true;
    for (size_t nl; (nl = t.str.find('\n', at)) != std::string::npos || at <= t.str.size(); at = nl + 1) {
      const Text line = t.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
      if ((!first_line || (first && truthy(*first))) && !line.str.empty()) out.append(pad);
      out.append(line);
      first_line = false;
      if (nl == std::string::npos) break;
      out.append("\n");
    }
    return out;
  }
  fail("filter '" + std::string(n) + "' is not supported");
}

bool apply_test(std::string_view n, const Value& v, Call& c) {
  const Value* other = arg(c, 0, "value");
  auto need_other = [&]() -> const Value& {
    if (!other) fail("test '" + std::string(n) + "' needs an argument");
    return *other;
  };
  if (n == "defined") return !v.is_undefined();
  if (n == "undefined") return v.is_undefined();
  if (n == "none") return v.is_none();
  if (n == "string") return v.is_string();
  if (n == "mapping") return v.is_dict();
  if (n == "iterable") return v.is_list() || v.is_dict() || v.is_string();
  if (n == "sequence") return v.is_list() || v.is_dict() || v.is_string();
  if (n == "number") return v.is_number();
  if (n == "integer") return v.is_int();
  if (n == "float") return v.is_float();
  if (n == "boolean") return v.is_bool();
  if (n == "true") return v.is_bool() && std::get<bool>(v.v);
  if (n == "false") return v.is_bool() && !std::get<bool>(v.v);
  if (n == "callable") return v.is_callable();
  if (n == "even" || n == "odd") {
    if (!v.is_int()) fail("test '" + std::string(n) + "' needs an integer, got " + type_name(v));
    return (std::get<int64_t>(v.v) % 2 == 0) == (n == "even");
  }
  if (n == "divisibleby") {
    const Value& d = need_other();
    if (!v.is_int() || !d.is_int() || std::get<int64_t>(d.v) == 0) fail("divisibleby needs non-zero integers");
    return std::get<int64_t>(d.v) == -1 || std::get<int64_t>(v.v) % std::get<int64_t>(d.v) == 0;  // min % -1 traps
  }
  if (n == "equalto" || n == "eq") return equal(v, need_other());
  if (n == "ne") return !equal(v, need_other());
  if (n == "lt" || n == "gt" || n == "le" || n == "ge") {
    const Value& o = need_other();
    if (!v.is_number() || !o.is_number()) fail("test '" + std::string(n) + "' needs numbers");
    const double a = v.number(), b = o.number();
    return n == "lt" ? a < b : n == "gt" ? a > b : n == "le" ? a <= b : a >= b;
  }
  if (n == "sameas") {
    const Value& o = need_other();
    if (v.is_none() || v.is_bool()) return equal(v, o) && o.v.index() == v.v.index();
    return v.is_list() && o.is_list() ? &v.list() == &o.list() : v.is_dict() && o.is_dict() && &v.dict() == &o.dict();
  }
  if (n == "in") {
    const Value& o = need_other();
    for (const Value& x : iterate(o))
      if (equal(x, v)) return true;
    return o.is_string() && v.is_string() && o.str().find(v.str()) != std::string::npos;
  }
  if (n == "lower" || n == "upper") {
    if (!v.is_string()) return false;
    return case_map(v.text(), n == "upper" ? 1 : 0).str == v.str();
  }
  fail("test '" + std::string(n) + "' is not supported");
}

Value call_method(const Value& o, std::string_view n, Call& c) {
  if (o.is_dict()) {
    if (n == "items") return dict_items(o);
    if (n == "keys") return iterate(o);
    if (n == "values") {
      List out;
      for (const auto& [k, v] : o.dict()) out.push_back(v);
      return out;
    }
    if (n == "get") {
      const std::string key = string_arg(c, 0, "key", "get");
      const Value found = o.get(key);
      if (!found.is_undefined()) return found;
      const Value* otherwise = arg(c, 1, "default");
      return otherwise ? *otherwise : Value(None{});
    }
  }
  if (o.is_string()) {
    const Text& t = o.text();
    if (n == "startswith" || n == "endswith") {
      const Value* p = arg(c, 0, "prefix");
      if (!p) fail(std::string(n) + "() takes an argument");
      List options = p->is_list() ? p->list() : List{*p};
      for (const Value& x : options) {
        const std::string& s = need_string(x, n).str;
        if (n == "startswith" ? t.str.starts_with(s) : t.str.ends_with(s)) return true;
      }
      return false;
    }
    if (n == "strip" || n == "lstrip" || n == "rstrip") {
      const Value* chars = arg(c, 0, "chars");
      const std::string set = chars && !chars->is_none() ? need_string(*chars, n).str : std::string(kSpace);
      return strip(t, n != "rstrip", n != "lstrip", set);
    }
    if (n == "split") {
      const Value* max = arg(c, 1, "maxsplit");
      return split(t, arg(c, 0, "sep"), max && max->is_int() ? std::get<int64_t>(max->v) : -1);
    }
    if (n == "replace") {
      const Value* count = arg(c, 2, "count");
      return replace(t, string_arg(c, 0, "old", "replace"), string_arg(c, 1, "new", "replace"),
                     count && count->is_int() ? std::get<int64_t>(count->v) : -1);
    }
    if (n == "upper") return case_map(t, 1);
    if (n == "lower") return case_map(t, 0);
    if (n == "capitalize") return case_map(t, 2);
    if (n == "title") return case_map(t, 3);
    if (n == "find") {
      const size_t at = t.str.find(string_arg(c, 0, "sub", "find"));
      if (at == std::string::npos) return int64_t{-1};
      return int64_t(code_point_offsets(t.str.substr(0, at)).size() - 1);
    }
  }
  fail("'" + type_name(o) + "' object has no method '" + std::string(n) + "'");
}

Value global(std::string_view n, std::time_t now) {
  if (n == "raise_exception")
    return Function([](Call& c) -> Value {
      const Value* msg = arg(c, 0, "message");
      fail("raise_exception: " + (msg ? to_text(*msg).str : std::string()));
    });
  if (n == "strftime_now")
    return Function([now](Call& c) -> Value {
      const std::string fmt = string_arg(c, 0, "format", "strftime_now");
      std::tm tm{};
      localtime_r(&now, &tm);
      std::array<char, 256> buf{};
      const size_t len = std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
      return std::string(buf.data(), len);
    });
  if (n == "namespace")
    return Function([](Call& c) -> Value {
      if (!c.args.empty()) fail("namespace() takes keyword arguments only");
      Value ns = Dict(c.kwargs.begin(), c.kwargs.end());
      ns.is_namespace = true;
      return ns;
    });
  if (n == "range")
    return Function([](Call& c) -> Value {
      int64_t start = 0, stop = 0, step = 1;
      for (const Value& a : c.args)
        if (!a.is_int()) fail("range() needs integers, got " + type_name(a));
      if (c.args.size() == 1) stop = std::get<int64_t>(c.args[0].v);
      else if (c.args.size() >= 2) {
        start = std::get<int64_t>(c.args[0].v);
        stop = std::get<int64_t>(c.args[1].v);
        if (c.args.size() >= 3) step = std::get<int64_t>(c.args[2].v);
      }
      if (step == 0 || (static_cast<__int128>(stop) - start) / step > 100000) fail("range() too long or with step 0");
      List out;
      for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
        out.push_back(i);
        if (__builtin_add_overflow(i, step, &i)) break;  // past int64 is past stop
      }
      return out;
    });
  return Value::undefined(std::string(n));
}

}  // namespace inferd::engine::jinja
