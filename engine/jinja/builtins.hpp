// Jinja2's filters and tests, Python's string and dict methods, and the
// functions transformers gives chat templates, as far as chat templates use
// them. The parser refuses a name not listed here.
#pragma once
#include <ctime>
#include <string_view>

#include "engine/jinja/value.hpp"

namespace inferd::engine::jinja {

bool has_filter(std::string_view name);
bool has_test(std::string_view name);
bool has_method(std::string_view name);
bool has_global(std::string_view name);

// Throw RenderError (without the line: the evaluator adds it).
Value apply_filter(std::string_view name, const Value& subject, Call& call);
bool apply_test(std::string_view name, const Value& subject, Call& call);
Value call_method(const Value& object, std::string_view name, Call& call);
// raise_exception, strftime_now (formatting `now`, local time), namespace, range.
Value global(std::string_view name, std::time_t now);

// The items a for loop visits: a list's, a dict's keys, a string's characters.
List iterate(const Value& v);

}  // namespace inferd::engine::jinja
