// Constrained decoding for JSON: a compiled JSON Schema (engine/grammar/json_schema.hpp)
// is a Grammar, a graph of plain nodes; a Matcher (matcher.hpp) walks it byte by
// byte as a pushdown automaton; token_mask.hpp turns that into the set of
// vocabulary tokens a request may sample next.
//
// Written here rather than taken from a library: no grammar engine for
// constrained decoding (xgrammar, llguidance, outlines-core) is packaged in
// Debian 12, dependencies come only from Debian, and the JSON Schema subset that
// structured output needs is small enough to keep deterministic and fast.
//
// The language a Grammar accepts is a subset of what its schema allows: compact
// JSON (one optional space after ':' and ','), properties without duplicates,
// numbers without exponents, no escaped UTF-16 surrogates (D800 to DFFF), bounded
// strings and numbers. Generating a subset is always valid; it keeps outputs
// short and makes every step's choice deterministic (the alternatives of a union
// must begin with different bytes).
#pragma once
#include <bitset>
#include <cstdint>
#include <string>
#include <vector>

namespace inferd::engine::grammar {

// Bounds that keep every generation finite and every state small.
inline constexpr int kMaxDepth = 32;           // nested objects and arrays
inline constexpr int kMaxStringLength = 4096;  // characters of a string (an escape is one)
inline constexpr int kMaxIntegerDigits = 16;   // digits before the point
inline constexpr int kMaxFractionDigits = 16;  // digits after it
inline constexpr int kMaxChoices = 64;         // properties of an object, values of an enum (bit masks)

enum class Kind : uint8_t {
  Object,    // {"key": value, ...}
  Array,     // [value, ...]
  String,    // any string
  Number,    // -12.5
  Integer,   // -12
  Literals,  // one of a list of JSON texts (enum, const, true, false, null)
  Union,     // one of several nodes, told apart by their first byte
  // Beyond JSON values, for texts around them (tool calls, tool_calls.hpp):
  Sequence,  // several nodes, one after another, nothing between them (none: nothing at all)
  Tagged,    // one of several literal heads, then the node that head selects
  Repeat,    // one node, then any number of another (a later item with its separator)
  Text,      // free text, until a tag (literals[0]) ends it and options[0] follows
};

struct Property {
  std::string key;  // as it appears in the output, quotes included: "\"name\""
  int value = -1;   // node index
  bool required = false;
};

struct Node {
  Kind kind = Kind::String;
  std::bitset<256> first;  // bytes a value of this node can begin with

  // Object: declared properties, or (none declared) free keys whose values are `values`.
  std::vector<Property> properties;
  uint64_t required = 0;  // bit i: properties[i] is required
  bool ordered = false;   // properties appear in declared order (strict mode)
  int values = -1;        // free-key objects: the node of every value

  // Array
  int items = -1;
  int min_items = 0;
  int max_items = -1;  // -1: no bound

  // String: length in characters (code points; an escape is one)
  int min_length = 0;
  int max_length = kMaxStringLength;
  bool no_angle = false;  // String: no raw '<' (\u003c writes one), so no tag can appear inside it

  // Literals: compact JSON texts, e.g. "\"red\"", "3", "null"
  std::vector<std::string> literals;

  // Union: nodes whose `first` sets do not overlap. Sequence: the parts, in
  // order. Tagged: the node after each head (literals[i] selects options[i]).
  // Text: the node after its tag.
  std::vector<int> options;

  // Tagged: `literals` are the heads, none a prefix of another (so the head
  // that ends is the only one left). Repeat: `items` is the first item and
  // `values` each later one; min_items/max_items count both.
};

struct Grammar {
  std::vector<Node> nodes;
  int root = -1;
  int string_node = -1;  // a String node: the keys of free-key objects
};

}  // namespace inferd::engine::grammar
