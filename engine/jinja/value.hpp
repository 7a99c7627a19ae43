// The values a chat template computes with, as Jinja2 sees Python's: none,
// booleans, integers, floats, strings, lists and dicts (keys kept in insertion
// order), callables, and Undefined for a name or key that is not there.
//
// A string remembers which of its bytes came from the request (message content,
// tool definitions): those ranges follow the bytes through concatenation,
// slicing, trimming and splitting, so the rendered prompt knows where the
// client's text lies and the tokenizer never reads control tokens there.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace inferd::engine::jinja {

// A byte range [begin, end) of a string.
struct Range {
  size_t begin = 0, end = 0;
};

// A string and the ranges of it that are the request's text.
struct Text {
  std::string str;
  std::vector<Range> marks;  // sorted, disjoint, non-empty

  Text() = default;
  Text(std::string s) : str(std::move(s)) {}  // NOLINT: template text, unmarked
  static Text request(std::string s);         // all of it the request's text

  void append(const Text& t);
  void append(std::string_view s) { str += s; }
  void append(const std::string& s) { str += s; }
  void append(const char* s) { str += s; }
  Text substr(size_t pos, size_t len = std::string::npos) const;
  // The same marking over a rewritten string: marked where any of this was.
  Text rewritten(std::string s) const;
};

struct Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;
struct Call;  // arguments of a call
using Function = std::function<Value(Call&)>;

struct Undefined {
  std::string name;  // what was looked up, for the error when it is used
};
struct None {};

// Lists and dicts are shared: templates cannot change them (Jinja2's sandbox
// forbids list.append), except a namespace(), whose attributes `set` assigns.
struct Value {
  std::variant<Undefined, None, bool, int64_t, double, Text, std::shared_ptr<const List>, std::shared_ptr<Dict>,
               std::shared_ptr<const Function>>
      v;
  bool is_namespace = false;
  bool from_request = false;
  bool is_tuple = false;  // a list Python would write as a tuple: (a, b)  // a list or dict of the request's JSON: its keys are the request's text too

  Value() : v(Undefined{}) {}
  Value(None) : v(None{}) {}
  Value(bool b) : v(b) {}
  Value(int64_t i) : v(i) {}
  Value(int i) : v(int64_t{i}) {}
  Value(double d) : v(d) {}
  Value(Text t) : v(std::move(t)) {}
  Value(std::string s) : v(Text(std::move(s))) {}
  Value(const char* s) : v(Text(std::string(s))) {}
  Value(List l) : v(std::make_shared<const List>(std::move(l))) {}
  Value(Dict d) : v(std::make_shared<Dict>(std::move(d))) {}
  Value(Function f) : v(std::make_shared<const Function>(std::move(f))) {}
  static Value undefined(std::string name) { Value x; x.v = Undefined{std::move(name)}; return x; }

  bool is_undefined() const { return std::holds_alternative<Undefined>(v); }
  bool is_none() const { return std::holds_alternative<None>(v); }
  bool is_bool() const { return std::holds_alternative<bool>(v); }
  bool is_int() const { return std::holds_alternative<int64_t>(v); }
  bool is_float() const { return std::holds_alternative<double>(v); }
  bool is_number() const { return is_int() || is_float(); }
  bool is_string() const { return std::holds_alternative<Text>(v); }
  bool is_list() const { return std::holds_alternative<std::shared_ptr<const List>>(v); }
  bool is_dict() const { return std::holds_alternative<std::shared_ptr<Dict>>(v); }
  bool is_callable() const { return std::holds_alternative<std::shared_ptr<const Function>>(v); }

  const Text& text() const { return std::get<Text>(v); }
  const std::string& str() const { return text().str; }
  const List& list() const { return *std::get<std::shared_ptr<const List>>(v); }
  Dict& dict() const { return *std::get<std::shared_ptr<Dict>>(v); }
  const Function& function() const { return *std::get<std::shared_ptr<const Function>>(v); }
  double number() const { return is_int() ? double(std::get<int64_t>(v)) : std::get<double>(v); }

  // dict[key]; Undefined when absent.
  Value get(std::string_view key) const;
};

struct Call {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;
};

// Errors in rendering: a type Jinja2 would refuse, an undefined value used, a
// template's raise_exception(). The message names the template line.
struct RenderError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Python's truth value (Undefined is false).
bool truthy(const Value& v);
// Python's `==` between the values Jinja2 compares.
bool equal(const Value& a, const Value& b);
// A type's name as Jinja2's errors spell it.
std::string type_name(const Value& v);
// What `{{ v }}` writes: Python's str(); marks kept for strings.
Text to_text(const Value& v);
// json.dumps(v, ensure_ascii=False, indent=indent) as transformers' tojson
// writes it (indent < 0: on one line, ", " and ": " separators).
Text to_json(const Value& v, int indent = -1);
// A JSON document as a value; every string in it marked as the request's text.
// Throws std::invalid_argument when it is not JSON.
Value from_json_request(std::string_view json);

// Python string helpers over UTF-8: code points, not bytes.
std::vector<size_t> code_point_offsets(std::string_view s);  // start of each, and s.size() last

}  // namespace inferd::engine::jinja
