#include "engine/jinja/value.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>

#include <boost/json.hpp>

namespace inferd::engine::jinja {

namespace {

void add_mark(std::vector<Range>& marks, Range r) {
  if (r.begin >= r.end) return;
  if (!marks.empty() && marks.back().end == r.begin) marks.back().end = r.end;
  else marks.push_back(r);
}

}  // namespace

Text Text::request(std::string s) {
  Text t(std::move(s));
  add_mark(t.marks, {0, t.str.size()});
  return t;
}

void Text::append(const Text& t) {
  const size_t base = str.size();
  str += t.str;
  for (const Range& r : t.marks) add_mark(marks, {base + r.begin, base + r.end});
}

Text Text::substr(size_t pos, size_t len) const {
  pos = std::min(pos, str.size());
  len = std::min(len, str.size() - pos);
  Text out(str.substr(pos, len));
  for (const Range& r : marks) {
    const size_t b = std::max(r.begin, pos), e = std::min(r.end, pos + len);
    if (b < e) add_mark(out.marks, {b - pos, e - pos});
  }
  return out;
}

Text Text::rewritten(std::string s) const {
  return marks.empty() ? Text(std::move(s)) : Text::request(std::move(s));
}

Value Value::get(std::string_view key) const {
  if (is_dict())
    for (const auto& [k, v] : dict())
      if (k == key) return v;
  return undefined(std::string(key));
}

bool truthy(const Value& v) {
  struct {
    bool operator()(const Undefined&) const { return false; }
    bool operator()(const None&) const { return false; }
    bool operator()(bool b) const { return b; }
    bool operator()(int64_t i) const { return i != 0; }
    bool operator()(double d) const { return d != 0; }
    bool operator()(const Text& t) const { return !t.str.empty(); }
    bool operator()(const std::shared_ptr<const List>& l) const { return !l->empty(); }
    bool operator()(const std::shared_ptr<Dict>& d) const { return !d->empty(); }
    bool operator()(const std::shared_ptr<const Function>&) const { return true; }
  } visit;
  return std::visit(visit, v.v);
}

bool equal(const Value& a, const Value& b) {
  if ((a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool())) {
    auto num = [](const Value& x) { return x.is_bool() ? double(std::get<bool>(x.v)) : x.number(); };
    return num(a) == num(b);
  }
  if (a.is_string() && b.is_string()) return a.str() == b.str();
  if (a.is_none() && b.is_none()) return true;
  if (a.is_list() && b.is_list()) {
    const List &x = a.list(), &y = b.list();
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i)
      if (!equal(x[i], y[i])) return false;
    return true;
  }
  if (a.is_dict() && b.is_dict()) {
    const Dict &x = a.dict(), &y = b.dict();
    if (x.size() != y.size()) return false;
    for (const auto& [k, v] : x)
      if (!equal(v, b.get(k))) return false;
    return true;
  }
  return false;
}

std::string type_name(const Value& v) {
  static constexpr std::array<const char*, 9> names = {"Undefined", "NoneType", "bool", "int", "float",
                                                       "str",       "list",     "dict", "function"};
  return v.is_namespace ? "Namespace" : names[v.v.index()];
}

namespace {

// repr(float): the shortest digits that read back, fixed between 1e-4 and 1e16.
std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  std::array<char, 64> buf{};
  auto res = std::to_chars(buf.data(), buf.data() + buf.size(), d, std::chars_format::scientific);
  std::string sci(buf.data(), res.ptr);
  const size_t e = sci.find('e');
  const int exp = std::stoi(sci.substr(e + 1));
  std::string digits;
  bool negative = false;
  for (char c : sci.substr(0, e)) {
    if (c == '-') negative = true;
    else if (c != '.') digits += c;
  }
  std::string out = negative ? "-" : "";
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out += "0." + std::string(size_t(-exp - 1), '0') + digits;
    } else {
      if (digits.size() <= size_t(exp) + 1) digits += std::string(size_t(exp) + 1 - digits.size(), '0');
      out += digits.substr(0, size_t(exp) + 1);
      const std::string frac = digits.substr(size_t(exp) + 1);
      out += '.';
      out += frac.empty() ? std::string("0") : frac;
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) {
    out += '.';
    out.append(digits, 1);
  }
  char ebuf[16];
  std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
  return out + ebuf;
}

// repr(str): single quotes unless the text has one and no double quote.
std::string string_repr(std::string_view s) {
  const char q = s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos ? '"' : '\'';
  std::string out(1, q);
  for (char c : s) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c == q) {
          out += '\\';
          out += c;
        } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          char b[8];
          std::snprintf(b, sizeof b, "\\x%02x", static_cast<unsigned char>(c));
          out += b;
        } else {
          out += c;
        }
    }
  }
  return out + q;
}

void repr(const Value& v, std::string& out, bool& marked) {
  if (v.is_string()) {
    marked = marked || !v.text().marks.empty();
    out += string_repr(v.str());
  } else if (v.is_list()) {
    out += v.is_tuple ? '(' : '[';
    for (size_t i = 0; i < v.list().size(); ++i) {
      if (i) out += ", ";
      repr(v.list()[i], out, marked);
    }
    if (v.is_tuple && v.list().size() == 1) out += ',';
    out += v.is_tuple ? ')' : ']';
  } else if (v.is_dict()) {
    marked = marked || v.from_request;
    out += '{';
    bool first = true;
    for (const auto& [k, x] : v.dict()) {
      if (!first) out += ", ";
      first = false;
      out += string_repr(k) + ": ";
      repr(x, out, marked);
    }
    out += '}';
  } else {
    out += to_text(v).str;
  }
}

void json_string(std::string_view s, std::string& out) {
  out += '"';
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", static_cast<unsigned char>(c));
          out += b;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

void json(const Value& v, int indent, int depth, Text& out) {
  auto newline = [&](int d) {
    if (indent < 0) return;
    out.str += '\n';
    out.str += std::string(size_t(indent) * size_t(d), ' ');
  };
  const char* comma = indent < 0 ? ", " : ",";
  if (v.is_string()) {
    const size_t begin = out.str.size();
    json_string(v.str(), out.str);
    if (!v.text().marks.empty()) add_mark(out.marks, {begin, out.str.size()});
  } else if (v.is_list()) {
    if (v.list().empty()) return out.append("[]");
    out.append("[");
    for (size_t i = 0; i < v.list().size(); ++i) {
      if (i) out.append(comma);
      newline(depth + 1);
      json(v.list()[i], indent, depth + 1, out);
    }
    newline(depth);
    out.append("]");
  } else if (v.is_dict()) {
    if (v.dict().empty()) return out.append("{}");
    out.append("{");
    bool first = true;
    for (const auto& [k, x] : v.dict()) {
      if (!first) out.append(comma);
      first = false;
      newline(depth + 1);
      const size_t begin = out.str.size();
      json_string(k, out.str);
      if (v.from_request) add_mark(out.marks, {begin, out.str.size()});
      out.append(": ");
      json(x, indent, depth + 1, out);
    }
    newline(depth);
    out.append("}");
  } else if (v.is_bool()) {
    out.append(std::get<bool>(v.v) ? "true" : "false");
  } else if (v.is_none()) {
    out.append("null");
  } else if (v.is_number()) {
    out.append(to_text(v).str);
  } else {
    throw RenderError("Object of type " + type_name(v) + " is not JSON serializable");
  }
}

Value from_boost(const boost::json::value& j) {
  Value out;
  switch (j.kind()) {
    case boost::json::kind::null: return None{};
    case boost::json::kind::bool_: return j.get_bool();
    case boost::json::kind::int64: return j.get_int64();
    case boost::json::kind::uint64: return static_cast<int64_t>(j.get_uint64());
    case boost::json::kind::double_: return j.get_double();
    case boost::json::kind::string: return Text::request(std::string(j.get_string()));
    case boost::json::kind::array: {
      List l;
      for (const auto& x : j.get_array()) l.push_back(from_boost(x));
      out = Value(std::move(l));
      break;
    }
    case boost::json::kind::object: {
      Dict d;
      for (const auto& [k, x] : j.get_object()) d.emplace_back(std::string(k), from_boost(x));
      out = Value(std::move(d));
      break;
    }
  }
  out.from_request = true;
  return out;
}

}  // namespace

Text to_text(const Value& v) {
  if (v.is_string()) return v.text();
  if (v.is_undefined()) return {};
  if (v.is_none()) return Text("None");
  if (v.is_bool()) return Text(std::get<bool>(v.v) ? "True" : "False");
  if (v.is_int()) return Text(std::to_string(std::get<int64_t>(v.v)));
  if (v.is_float()) return Text(float_repr(std::get<double>(v.v)));
  if (v.is_callable()) return Text("<function>");
  std::string s;
  bool marked = false;
  repr(v, s, marked);
  return marked ? Text::request(std::move(s)) : Text(std::move(s));
}

Text to_json(const Value& v, int indent) {
  Text out;
  json(v, indent, 0, out);
  return out;
}

Value from_json_request(std::string_view text) {
  boost::system::error_code ec;
  const boost::json::value j = boost::json::parse(text, ec);
  if (ec) throw std::invalid_argument("not JSON: " + ec.message());
  return from_boost(j);
}

std::vector<size_t> code_point_offsets(std::string_view s) {
  std::vector<size_t> out;
  for (size_t i = 0; i < s.size(); ++i)
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) out.push_back(i);
  out.push_back(s.size());
  return out;
}

}  // namespace inferd::engine::jinja
