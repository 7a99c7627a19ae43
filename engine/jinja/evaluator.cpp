#include "engine/jinja/evaluator.hpp"

#include <cmath>
#include <limits>
#include <map>
#include <optional>

#include "engine/jinja/builtins.hpp"
#include "engine/jinja/parser.hpp"

namespace inferd::engine::jinja {

namespace {

// A RenderError whose message already names the line.
struct LocatedError : RenderError {
  using RenderError::RenderError;
};

[[noreturn]] void fail(const std::string& what) { throw RenderError(what); }
// Python's integers do not overflow; these are int64: past it is an error, not wrapped.
void checked(bool overflowed) {
  if (overflowed) fail("integer overflow");
}

enum class Flow { Normal, Break, Continue };

using Frame = std::map<std::string, Value, std::less<>>;

// Python's slice.indices() and the positions a slice visits.
std::vector<size_t> slice_positions(size_t size, const Value& start, const Value& stop, const Value& step) {
  auto as_int = [](const Value& v, std::string_view what) -> std::optional<int64_t> {
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    if (!v.is_int()) fail("slice " + std::string(what) + " must be an integer, got " + type_name(v));
    return std::get<int64_t>(v.v);
  };
  const int64_t n = int64_t(size);
  const int64_t s = as_int(step, "step").value_or(1);
  if (s == 0) fail("slice step cannot be zero");
  auto clamp = [&](std::optional<int64_t> i, int64_t fallback) {
    if (!i) return fallback;
    int64_t x = *i < 0 ? *i + n : *i;
    if (s > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  const int64_t b = clamp(as_int(start, "start"), s > 0 ? 0 : n - 1);
  const int64_t e = clamp(as_int(stop, "stop"), s > 0 ? n : -1);
  std::vector<size_t> out;
  for (int64_t i = b; s > 0 ? i < e : i > e;) {
    out.push_back(size_t(i));
    if (__builtin_add_overflow(i, s, &i)) break;  // past int64 is past the end
  }
  return out;
}

int compare(const Value& a, const Value& b, const std::string& op) {
  if (a.is_number() && b.is_number()) return a.number() < b.number() ? -1 : a.number() > b.number() ? 1 : 0;
  if (a.is_string() && b.is_string()) return a.str().compare(b.str());
  fail("'" + op + "' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'");
}

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined() || b.is_undefined())
    fail("'" + (a.is_undefined() ? std::get<Undefined>(a.v).name : std::get<Undefined>(b.v).name) + "' is undefined");
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      Text t = a.text();
      t.append(b.text());
      return t;
    }
    if (a.is_list() && b.is_list()) {
      List l = a.list();
      l.insert(l.end(), b.list().begin(), b.list().end());
      return l;
    }
  }
  if (op == "*" && a.is_string() && b.is_int()) {
    // A prompt is never megabytes of one repeated string: refuse, not exhaust memory.
    const int64_t n = std::get<int64_t>(b.v);
    if (n > 0 && a.text().str.size() > 0 && static_cast<uint64_t>(n) > (size_t(1) << 20) / a.text().str.size())
      fail("string repetition past 1 MiB");
    Text t;
    for (int64_t i = 0; i < n; ++i) t.append(a.text());
    return t;
  }
  if ((a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool())) {
    auto num = [](const Value& x) { return x.is_bool() ? double(std::get<bool>(x.v)) : x.number(); };
    const bool ints = !a.is_float() && !b.is_float();
    auto as_i = [](const Value& x) { return x.is_bool() ? int64_t(std::get<bool>(x.v)) : std::get<int64_t>(x.v); };
    if (op == "/") {
      if (num(b) == 0) fail("division by zero");
      return num(a) / num(b);
    }
    if (op == "**") {
      if (ints && as_i(b) >= 0) {
        const int64_t x = as_i(a), n = as_i(b);
        if (x == 0) return int64_t(n == 0);
        if (x == 1 || x == -1) return n % 2 ? x : int64_t(1);
        int64_t r = 1;  // |x| >= 2: overflows within 63 steps
        for (int64_t k = 0; k < n; ++k) checked(__builtin_mul_overflow(r, x, &r));
        return r;
      }
      return std::pow(num(a), num(b));
    }
    if (ints) {
      const int64_t x = as_i(a), y = as_i(b);
      if ((op == "//" || op == "%") && y == 0) fail("integer division or modulo by zero");
      int64_t r = 0;
      if (op == "+") return checked(__builtin_add_overflow(x, y, &r)), r;
      if (op == "-") return checked(__builtin_sub_overflow(x, y, &r)), r;
      if (op == "*") return checked(__builtin_mul_overflow(x, y, &r)), r;
      checked(x == std::numeric_limits<int64_t>::min() && y == -1);
      const int64_t q = x / y - ((x % y != 0) && ((x < 0) != (y < 0)));  // Python floors
      if (op == "//") return q;
      if (op == "%") return x - q * y;
    } else {
      const double x = num(a), y = num(b);
      if (op == "+") return x + y;
      if (op == "-") return x - y;
      if (op == "*") return x * y;
      if (y == 0) fail("float division by zero");
      if (op == "//") return std::floor(x / y);
      if (op == "%") return x - std::floor(x / y) * y;
    }
  }
  if (op == "%" && a.is_string()) fail("string formatting with '%' is not supported");
  fail("unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
}

bool contains(const Value& haystack, const Value& needle) {
  if (haystack.is_undefined()) return false;  // iterates as empty
  if (haystack.is_string()) {
    if (!needle.is_string()) fail("'in <string>' requires a string as left operand, not " + type_name(needle));
    return haystack.str().find(needle.str()) != std::string::npos;
  }
  if (haystack.is_dict()) return needle.is_string() && !haystack.get(needle.str()).is_undefined();
  if (haystack.is_list()) {
    for (const Value& x : haystack.list())
      if (equal(x, needle)) return true;
    return false;
  }
  fail("argument of type '" + type_name(haystack) + "' is not iterable");
}

class Evaluator {
 public:
  Evaluator(const Dict& context, std::time_t now) {
    frames_.emplace_back();
    for (std::string_view g : {"raise_exception", "strftime_now", "namespace", "range"})
      frames_[0][std::string(g)] = global(g, now);
    for (const auto& [k, v] : context) frames_[0][k] = v;
  }

  Text run(const Body& body) {
    exec(body);
    return std::move(out_);
  }

 private:
  Flow exec(const Body& body) {
    for (const Node& n : body) {
      const Flow f = exec(n);
      if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
  }

  Flow exec(const Node& n) {
    switch (n.kind) {
      case Node::Text: out_.append(n.text); break;
      case Node::Output: out_.append(to_text(eval(*n.expr))); break;
      case Node::If:
        for (const auto& [cond, body] : n.branches)
          if (!cond || truthy(eval(*cond))) return exec(body);
        break;
      case Node::For: for_loop(n); break;
      case Node::Set: set(n, eval(*n.expr)); break;
      case Node::SetBlock: set(n, capture(n.body)); break;
      case Node::Macro: frames_.back()[n.targets[0]] = macro(n); break;
      case Node::Break: return Flow::Break;
      case Node::Continue: return Flow::Continue;
    }
    return Flow::Normal;
  }

  Text capture(const Body& body) {
    Text saved = std::move(out_);
    out_ = {};
    exec(body);
    std::swap(saved, out_);
    return saved;
  }

  void set(const Node& n, Value v) {
    located(n.line, [&] {
      if (n.attribute) {
        const Value ns = lookup(n.targets[0]);
        if (!ns.is_namespace) fail("cannot assign attribute on non-namespace object '" + n.targets[0] + "'");
        for (auto& [k, x] : ns.dict())
          if (k == n.targets[1]) return void(x = std::move(v));
        ns.dict().emplace_back(n.targets[1], std::move(v));
      } else if (n.targets.size() == 1) {
        frames_.back()[n.targets[0]] = std::move(v);
      } else {
        unpack(n.targets, v);
      }
    });
  }

  void unpack(const std::vector<std::string>& names, const Value& v) {
    const List items = iterate(v);
    if (items.size() != names.size())
      fail("cannot unpack " + std::to_string(items.size()) + " values into " + std::to_string(names.size()));
    for (size_t i = 0; i < names.size(); ++i) frames_.back()[names[i]] = items[i];
  }

  void for_loop(const Node& n) {
    List items = located(n.line, [&] { return iterate(eval(*n.expr)); });
    if (n.filter) {
      List kept;
      for (Value& x : items) {
        frames_.emplace_back();
        bind(n, x);
        if (truthy(eval(*n.filter))) kept.push_back(std::move(x));
        frames_.pop_back();
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      exec(n.else_body);
      return;
    }
    const int64_t len = int64_t(items.size());
    for (int64_t i = 0; i < len; ++i) {
      frames_.emplace_back();
      bind(n, items[size_t(i)]);
      frames_.back()["loop"] = Dict{{"index0", i},
                                    {"index", i + 1},
                                    {"revindex0", len - i - 1},
                                    {"revindex", len - i},
                                    {"first", i == 0},
                                    {"last", i == len - 1},
                                    {"length", len},
                                    {"previtem", i > 0 ? items[size_t(i - 1)] : Value::undefined("previtem")},
                                    {"nextitem", i + 1 < len ? items[size_t(i + 1)] : Value::undefined("nextitem")}};
      const Flow f = exec(n.body);
      frames_.pop_back();
      if (f == Flow::Break) break;
    }
  }

  void bind(const Node& n, const Value& item) {
    if (n.targets.size() == 1) frames_.back()[n.targets[0]] = item;
    else located(n.line, [&] { unpack(n.targets, item); });
  }

  // A macro as a function: its own scope over the template's top level.
  Value macro(const Node& n) {
    return Function([this, &n](Call& c) -> Value {
      if (c.args.size() > n.targets.size() - 1) fail("macro '" + n.targets[0] + "' takes fewer arguments");
      if (calls_ >= 100) fail("macro calls nested more than 100 deep");
      ++calls_;
      struct Leave {
        int& calls;
        ~Leave() { --calls; }
      } leave{calls_};
      std::vector<Frame> saved = std::move(frames_);
      frames_ = {saved[0], {}};
      for (size_t i = 1; i < n.targets.size(); ++i) {
        Value v = i - 1 < c.args.size() ? c.args[i - 1] : Value::undefined(n.targets[i]);
        for (auto& [k, x] : c.kwargs)
          if (k == n.targets[i]) v = x;
        if (v.is_undefined() && n.defaults[i - 1]) v = eval(*n.defaults[i - 1]);
        frames_.back()[n.targets[i]] = std::move(v);
      }
      Text body;
      try {
        body = capture(n.body);
      } catch (...) {
        frames_ = std::move(saved);
        throw;
      }
      frames_ = std::move(saved);
      return body;
    });
  }

  Value lookup(const std::string& name) const {
    for (auto f = frames_.rbegin(); f != frames_.rend(); ++f)
      if (auto it = f->find(name); it != f->end()) return it->second;
    return Value::undefined(name);
  }

  template <typename F>
  auto located(int line, F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (const LocatedError&) {
      throw;
    } catch (const RenderError& e) {
      throw LocatedError("line " + std::to_string(line) + ": " + e.what());
    }
  }

  static const std::string& undefined_name(const Value& v) { return std::get<Undefined>(v.v).name; }

  Value eval(const Expr& e) {
    return located(e.line, [&] { return evaluate(e); });
  }

  Call arguments(const Expr& e, size_t first) {
    Call c;
    for (size_t i = first; i < e.kids.size(); ++i) c.args.push_back(eval(*e.kids[i]));
    for (const auto& [k, x] : e.kwargs) c.kwargs.emplace_back(k, eval(*x));
    return c;
  }

  Value evaluate(const Expr& e) {
    switch (e.kind) {
      case Expr::Literal: return e.value;
      case Expr::Name: return lookup(e.name);
      case Expr::ListOf: {
        List l;
        for (const ExprPtr& k : e.kids) l.push_back(eval(*k));
        Value v = std::move(l);
        v.is_tuple = e.name == "tuple";
        return v;
      }
      case Expr::DictOf: {
        Dict d;
        for (size_t i = 0; i + 1 < e.kids.size(); i += 2) {
          const Value key = eval(*e.kids[i]);
          if (!key.is_string()) fail("dict keys must be strings, got " + type_name(key));
          d.emplace_back(key.str(), eval(*e.kids[i + 1]));
        }
        return d;
      }
      case Expr::Attr: {
        const Value o = eval(*e.kids[0]);
        if (o.is_undefined()) fail("'" + undefined_name(o) + "' is undefined");
        if (o.is_dict()) {
          Value v = o.get(e.name);
          if (v.is_undefined()) return Value::undefined(e.name);
          return v;
        }
        return Value::undefined(e.name);
      }
      case Expr::Item: return item(eval(*e.kids[0]), eval(*e.kids[1]));
      case Expr::Slice: {
        const Value o = eval(*e.kids[0]);
        Value parts[3];
        for (int i = 0; i < 3; ++i)
          if (e.kids[size_t(i) + 1]) parts[i] = eval(*e.kids[size_t(i) + 1]);
        if (o.is_undefined()) fail("'" + undefined_name(o) + "' is undefined");
        if (o.is_string()) {
          const auto at = code_point_offsets(o.str());
          Text out;
          for (size_t i : slice_positions(at.size() - 1, parts[0], parts[1], parts[2]))
            out.append(o.text().substr(at[i], at[i + 1] - at[i]));
          return out;
        }
        if (!o.is_list()) fail("'" + type_name(o) + "' object is not subscriptable");
        List out;
        for (size_t i : slice_positions(o.list().size(), parts[0], parts[1], parts[2])) out.push_back(o.list()[i]);
        return out;
      }
      case Expr::CallOf: {
        const Expr& callee = *e.kids[0];
        if (callee.kind == Expr::Attr) {
          const Value o = eval(*callee.kids[0]);
          if (o.is_undefined()) fail("'" + undefined_name(o) + "' is undefined");
          Call c = arguments(e, 1);
          return call_method(o, callee.name, c);
        }
        const Value f = eval(callee);
        if (!f.is_callable()) fail("'" + callee.name + "' is undefined or not callable");
        Call c = arguments(e, 1);
        return f.function()(c);
      }
      case Expr::Filter: {
        const Value v = eval(*e.kids[0]);
        Call c = arguments(e, 1);
        return apply_filter(e.name, v, c);
      }
      case Expr::Test: {
        const Value v = eval(*e.kids[0]);
        Call c = arguments(e, 1);
        return apply_test(e.name, v, c) != e.negated;
      }
      case Expr::Unary: {
        const Value v = eval(*e.kids[0]);
        if (e.name == "not") return !truthy(v);
        if (v.is_int()) {
          int64_t r = std::get<int64_t>(v.v);
          if (e.name == "-") checked(__builtin_sub_overflow(int64_t(0), r, &r));
          return r;
        }
        if (v.is_float()) return e.name == "-" ? -v.number() : v.number();
        fail("bad operand type for unary " + e.name + ": '" + type_name(v) + "'");
      }
      case Expr::Binary: return binary(e);
      case Expr::Cond:
        if (truthy(eval(*e.kids[1]))) return eval(*e.kids[0]);
        return e.kids[2] ? eval(*e.kids[2]) : Value::undefined("else");
    }
    fail("unknown expression");
  }

  Value item(const Value& o, const Value& key) {
    if (o.is_undefined()) fail("'" + undefined_name(o) + "' is undefined");
    if (o.is_dict()) {
      if (!key.is_string()) return Value::undefined(to_text(key).str);
      return o.get(key.str());
    }
    if ((o.is_list() || o.is_string()) && key.is_int()) {
      int64_t i = std::get<int64_t>(key.v);
      if (o.is_list()) {
        const int64_t n = int64_t(o.list().size());
        if (i < 0) i += n;
        return i >= 0 && i < n ? o.list()[size_t(i)] : Value::undefined("[" + std::to_string(i) + "]");
      }
      const auto at = code_point_offsets(o.str());
      const int64_t n = int64_t(at.size() - 1);
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined("[" + std::to_string(i) + "]");
      return o.text().substr(at[size_t(i)], at[size_t(i) + 1] - at[size_t(i)]);
    }
    return Value::undefined(to_text(key).str);
  }

  Value binary(const Expr& e) {
    const std::string& op = e.name;
    const Value a = eval(*e.kids[0]);
    if (op == "and") return truthy(a) ? eval(*e.kids[1]) : a;
    if (op == "or") return truthy(a) ? a : eval(*e.kids[1]);
    const Value b = eval(*e.kids[1]);
    if (op == "==") return equal(a, b) || (a.is_undefined() && b.is_undefined());
    if (op == "!=") return !(equal(a, b) || (a.is_undefined() && b.is_undefined()));
    if (op == "<") return compare(a, b, op) < 0;
    if (op == ">") return compare(a, b, op) > 0;
    if (op == "<=") return compare(a, b, op) <= 0;
    if (op == ">=") return compare(a, b, op) >= 0;
    if (op == "in") return contains(b, a);
    if (op == "not in") return !contains(b, a);
    if (op == "~") {
      Text t = to_text(a);
      t.append(to_text(b));
      return t;
    }
    return arithmetic(op, a, b);
  }

  std::vector<Frame> frames_;
  Text out_;
  int calls_ = 0;  // macro calls in progress
};

}  // namespace

Template::Template(std::string_view source) : program_(std::make_shared<const Program>(parse(source))) {}

Text Template::render(const Dict& context, std::time_t now) const {
  return Evaluator(context, now).run(program_->body);
}

}  // namespace inferd::engine::jinja
