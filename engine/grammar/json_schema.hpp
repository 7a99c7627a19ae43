// JSON Schema -> Grammar. The subset structured output needs: type (one or a
// list), object (properties, required, additionalProperties), array (items,
// minItems, maxItems), string (minLength, maxLength), number, integer, boolean,
// null, enum, const,
// anyOf / oneOf whose options begin with different bytes (e.g. differ in type),
// allOf of one schema, and local $ref (e.g. "#/$defs/Address"), recursive too
// (trees, lists) where the data has a finite value.
// Annotations (title, description, default, examples, ...) are ignored; any
// other keyword is refused rather than silently not enforced.
#pragma once
#include <stdexcept>
#include <string>

#include <boost/json/value.hpp>

#include "engine/grammar/grammar.hpp"

namespace inferd::engine::grammar {

// A schema this compiler cannot enforce. `path` names the offending field below
// the schema's root, e.g. "properties.zip.pattern" ("" for the root itself).
class SchemaError : public std::invalid_argument {
 public:
  SchemaError(std::string path, const std::string& message) : std::invalid_argument(message), path(std::move(path)) {}
  std::string path;
};

// `strict`: an object's properties appear in the order declared, as OpenAI's
// strict mode writes them; otherwise in any order, each at most once. Either
// way an object declaring properties gets no others (additionalProperties is
// satisfied by never writing extra ones). Throws SchemaError.
Grammar compile_json_schema(const boost::json::value& schema, bool strict);

// Any JSON object (response_format {"type": "json_object"}).
Grammar any_json_object();

}  // namespace inferd::engine::grammar
