// Constrained decoding: the schema compiler (what it accepts and refuses), the
// byte automaton (which texts are whole values of a schema), and the token mask
// (the same answers as trying every token, fast paths included).
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <boost/json/parse.hpp>

#include "engine/grammar/json_schema.hpp"
#include "engine/grammar/matcher.hpp"
#include "engine/grammar/token_mask.hpp"
#include "tests/unit/token_mask_check.hpp"

namespace g = inferd::engine::grammar;
namespace json = boost::json;

namespace {

std::shared_ptr<const g::Grammar> schema(const char* text, bool strict = true) {
  return std::make_shared<const g::Grammar>(g::compile_json_schema(json::parse(text), strict));
}

// `text` is a whole value of the grammar, and nothing may follow it.
bool matches(const std::shared_ptr<const g::Grammar>& gr, std::string_view text) {
  g::Matcher m(gr);
  return m.accept(text) && m.can_end();
}

// The path of the SchemaError compiling `text` throws, or "(none)".
std::string error_path(const char* text, bool strict = true) {
  try {
    g::compile_json_schema(json::parse(text), strict);
  } catch (const g::SchemaError& e) {
    return e.path;
  }
  return "(none)";
}

const char* kPerson = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "description": "ignored", "maxLength": 12},
    "age": {"type": "integer"},
    "email": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "minItems": 1, "maxItems": 2},
    "address": {"$ref": "#/$defs/Address"}
  },
  "required": ["name", "age", "address"],
  "additionalProperties": false,
  "$defs": {"Address": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": ["integer", "null"]}},
                        "required": ["city", "zip"]}}
})";

}  // namespace

TEST_CASE("grammar: any JSON object") {
  const auto gr = std::make_shared<const g::Grammar>(g::any_json_object());
  CHECK(matches(gr, "{}"));
  CHECK(matches(gr, R"({"a":1})"));
  CHECK(matches(gr, R"({"a": [1, -2.5, "x", {"b": null}, [], true, false], "c": {"d": {}}})"));
  CHECK(matches(gr, R"({"k\"ey":"v\\a\u00e9\n"})"));
  // No escaped surrogates: a lone one fails strict parsers (the tool call parser's).
  CHECK(matches(gr, R"({"a":"\uD7FF\ud7ff\uE000\ud000"})"));
  for (const char* esc : {"\\uD800", "\\udc00", "\\uDFFF", "\\ud83d\\ude00"})
    CHECK_FALSE(matches(gr, std::string("{\"a\":\"") + esc + "\"}"));
  CHECK_FALSE(matches(gr, "[]"));
  CHECK_FALSE(matches(gr, R"("text")"));
  CHECK_FALSE(matches(gr, R"({"a":1,})"));
  CHECK_FALSE(matches(gr, R"({ "a":1})"));     // no space after '{'
  CHECK_FALSE(matches(gr, R"({"a":  1})"));    // one space at most
  CHECK_FALSE(matches(gr, R"({"a":01})"));
  CHECK_FALSE(matches(gr, R"({"a":1e5})"));    // no exponents
  CHECK_FALSE(matches(gr, "{\"a\":\"x\ny\"}"));  // a raw control byte in a string
  CHECK_FALSE(matches(gr, R"({"a":"\x"})"));
  CHECK_FALSE(matches(gr, R"({"a":tru})"));
  // Strings hold well-formed UTF-8 only.
  CHECK(matches(gr, "{\"a\":\"\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\"}"));
  for (const char* bad : {"\xA9", "\xC3(", "\xC0\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xF5\x80\x80\x80",
                          "\xE2\x82"})
    CHECK_FALSE(matches(gr, std::string("{\"a\":\"") + bad + "\"}"));
  CHECK_FALSE(matches(gr, R"({"a":1})" " "));  // nothing after the object

  g::Matcher m(gr);
  CHECK_FALSE(m.can_end());
  REQUIRE(m.accept(R"({"a":)"));
  CHECK_FALSE(m.accept("}"));  // refused: nothing changed
  REQUIRE(m.accept("1"));
  CHECK_FALSE(m.finished());
  REQUIRE(m.accept("}"));
  CHECK(m.can_end());
  CHECK(m.finished());
}

TEST_CASE("grammar: a nested schema, strict order") {
  const auto gr = schema(kPerson);
  CHECK(matches(gr, R"({"name":"Ann","age":31,"address":{"city":"Oslo","zip":null}})"));
  CHECK(matches(gr, R"({"name": "Ann", "age": -3, "email": null, "tags": ["a", "b"], "address": {"city": "", "zip": 123}})"));
  CHECK(matches(gr, R"({"name":"Ann","age":3,"email":"a@b.c","address":{"city":"X","zip":1}})"));
  CHECK_FALSE(matches(gr, R"({"age":31,"name":"Ann","address":{"city":"Oslo","zip":null}})"));  // order
  CHECK_FALSE(matches(gr, R"({"name":"Ann","address":{"city":"Oslo","zip":null}})"));          // age missing
  CHECK_FALSE(matches(gr, R"({"name":"Ann","age":3.5,"address":{"city":"Oslo","zip":null}})")); // integer
  CHECK_FALSE(matches(gr, R"({"name":"Ann","age":3,"tags":[],"address":{"city":"O","zip":1}})"));  // minItems
  CHECK_FALSE(matches(gr, R"({"name":"Ann","age":3,"tags":["a","b","a"],"address":{"city":"O","zip":1}})"));
  CHECK_FALSE(matches(gr, R"({"name":"Ann","age":3,"tags":["c"],"address":{"city":"O","zip":1}})"));  // enum
  CHECK_FALSE(matches(gr, R"({"name":"Ann","age":3,"nick":"x","address":{"city":"O","zip":1}})"));  // extra
  CHECK_FALSE(matches(gr, R"({"name":"Ann","age":3,"address":{"city":"O"}})"));

  // Without strict: any order, each property once.
  const auto loose = schema(kPerson, false);
  CHECK(matches(loose, R"({"age":31,"name":"Ann","address":{"zip":null,"city":"Oslo"}})"));
  CHECK_FALSE(matches(loose, R"({"age":31,"age":31,"name":"Ann","address":{"zip":null,"city":"Oslo"}})"));
}

TEST_CASE("grammar: recursive $ref (a tree and a list)") {
  const auto tree = schema(R"({"$ref": "#/$defs/node", "$defs": {"node": {"type": "object",
      "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
      "required": ["v", "kids"], "additionalProperties": false}}})");
  CHECK(matches(tree, R"({"v":1,"kids":[]})"));
  CHECK(matches(tree, R"({"v":1,"kids":[{"v":2,"kids":[{"v":3,"kids":[]}]},{"v":4,"kids":[]}]})"));
  CHECK_FALSE(matches(tree, R"({"v":1,"kids":[{"v":2}]})"));
  const auto list = schema(R"({"type": "object", "properties": {"v": {"type": "string"},
      "next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}}, "required": ["v", "next"]})");
  CHECK(matches(list, R"({"v":"a","next":{"v":"b","next":null}})"));
  CHECK_FALSE(matches(list, R"({"v":"a","next":{"v":"b"}})"));
}

TEST_CASE("grammar: literals, numbers and bounds") {
  const auto nums = schema(R"({"enum": [1, 10, "x", null, true]})");
  CHECK(matches(nums, "1"));
  CHECK(matches(nums, "10"));
  CHECK(matches(nums, R"("x")"));
  CHECK(matches(nums, "null"));
  CHECK_FALSE(matches(nums, "100"));
  CHECK_FALSE(matches(nums, "false"));
  g::Matcher m(nums);
  REQUIRE(m.accept("1"));
  CHECK(m.can_end());  // whole, yet "10" could follow
  CHECK_FALSE(m.finished());

  const auto cnst = schema(R"({"type": "object", "properties": {"v": {"const": "fixed"}}, "required": ["v"]})");
  CHECK(matches(cnst, R"({"v":"fixed"})"));
  CHECK_FALSE(matches(cnst, R"({"v":"fixe"})"));

  const auto num = schema(R"({"type": "number"})");
  CHECK(matches(num, "-0.25"));
  CHECK(matches(num, "0"));
  CHECK_FALSE(matches(num, "-"));
  CHECK_FALSE(matches(num, "1."));
  CHECK(matches(num, std::string(g::kMaxIntegerDigits, '9')));
  CHECK_FALSE(matches(num, std::string(g::kMaxIntegerDigits + 1, '9')));

  const auto str = schema(R"({"type": "string"})");
  CHECK(matches(str, "\"" + std::string(g::kMaxStringLength, 'a') + "\""));
  CHECK_FALSE(matches(str, "\"" + std::string(g::kMaxStringLength + 1, 'a') + "\""));

  // Lengths count characters: "é" is two bytes, one character.
  const auto sized = schema(R"({"type": "string", "minLength": 2, "maxLength": 3})");
  CHECK(matches(sized, R"("ab")"));
  CHECK(matches(sized, "\"\xC3\xA9\xC3\xA9\xC3\xA9\""));
  CHECK(matches(sized, R"("a\n")"));
  CHECK_FALSE(matches(sized, R"("a")"));
  CHECK_FALSE(matches(sized, R"("abcd")"));

  const auto arr = schema(R"({"type": "array", "items": {"type": "boolean"}, "maxItems": 0})");
  CHECK(matches(arr, "[]"));
  CHECK_FALSE(matches(arr, "[true]"));
}

TEST_CASE("grammar: schemas refused name the field") {
  CHECK(error_path(R"({"type":"object","properties":{"x":{"type":"string","pattern":"^a"}}})") == "properties.x.pattern");
  CHECK(error_path(R"({"type":"string","format":"date-time"})") == "format");
  CHECK(error_path(R"({"type":"object","properties":{"x":{"anyOf":[{"type":"string"},{"enum":["a"]}]}}})") ==
        "properties.x.anyOf");
  CHECK(error_path(R"({"type":"thing"})") == "type");
  CHECK(error_path(R"({"type":"object","properties":{"a":{}},"required":["b"]})") == "required[0]");
  // A required property that refers back to its object has no finite value.
  CHECK(error_path(R"({"$defs":{"N":{"type":"object","properties":{"n":{"$ref":"#/$defs/N"}},"required":["n"]}},
                       "$ref":"#/$defs/N"})") == "");
  // Options told apart only once a recursive $ref is filled are checked then.
  CHECK(error_path(R"({"$defs":{"N":{"anyOf":[{"$ref":"#/$defs/N2"},{"type":"null"}]},
                                   "N2":{"anyOf":[{"type":"object"},{"$ref":"#/$defs/N"}]}},
                       "$ref":"#/$defs/N"})") != "(none)");
  CHECK(error_path(R"({"$ref":"#/$defs/Missing"})") == "$ref");
  CHECK(error_path(R"({"$ref":"http://example.com/s.json"})") == "$ref");
  CHECK(error_path(R"({"type":"array","items":[{"type":"string"}]})") == "items");
  CHECK(error_path(R"({"type":"array","minItems":3,"maxItems":2})") == "maxItems");
  CHECK(error_path(R"({"type":"string","enum":[1,2]})") == "enum");
  CHECK(error_path(R"({"allOf":[{"type":"string"},{"type":"null"}]})") == "allOf");
  CHECK(error_path(R"({"type":"integer","minimum":0})") == "minimum");
  CHECK(error_path(R"({"type":"string","minLength":3,"maxLength":2})") == "maxLength");
  CHECK(error_path(R"({"type":"string","minLength":-1})") == "minLength");
  CHECK(error_path("false") == "");
  {
    // A long chain of references is refused, not followed until the stack runs out.
    std::string chain = R"({"$ref": "#/$defs/d0", "$defs": {)";
    for (int i = 0; i < 200; ++i) chain += "\"d" + std::to_string(i) + "\": {\"$ref\": \"#/$defs/d" + std::to_string(i + 1) + "\"}, ";
    chain += R"("d200": {"type": "string"}}})";
    CHECK(error_path(chain.c_str()).rfind("$defs.d", 0) == 0);
  }
  CHECK(error_path(R"({"type":["integer","number","null"]})") == "(none)");  // integer beside number is number
  CHECK(error_path(R"({"allOf":[{"type":"string"}],"title":"t"})") == "(none)");
}

TEST_CASE("grammar: token mask equals trying every token") {
  // A vocabulary of the kinds of tokens byte-level BPE has: structure, whole
  // keys, text, digits, quotes with text on either side, escapes, newlines.
  const std::vector<std::string> vocab = {
      "",  // a control token (no text)
      "{", "}", "[", "]", ",", ":", " ", "\"", "{\"", "\"}", "\":", "\": ", "\",", "\", \"", ", ", "\n", "\\", "\\n",
      "\\u", "00", "e9", "name", "\"name\":", "age", "\"age", "city", "a", "b", "An", "n", " Oslo", "1", "12", "3",
      "-", ".", "5", "null", "nu", "ll", "true", "false", "\"a\"", "\"b\"]", "x\"", "é", "\xC3", "\xA9", "zip",
      "address", "tags", "email", "\"}}", "}}", "\"]", "\t", "\xA9O", "\xC3\xA9\xC3", " \xC3", "\xC3\xA9\"",
  };
  const int32_t eos = 0;
  g::TokenIndex index(vocab);
  const auto gr = schema(kPerson);
  const std::string doc =
      "{\"name\": \"An\\u00e9 \xC3\xA9O\", \"age\": -12,"
      R"( "email": null, "tags": ["a", "b"], "address": {"city": "x", "zip": 3}})";
  g::Matcher m(gr);
  g::TokenSet got;
  const std::vector<int32_t> stops = {eos};
  for (size_t i = 0; i <= doc.size(); ++i) {
    test_mask::check_against_brute_force(index, m, vocab, eos, doc.substr(0, i), got);
    if (i < doc.size()) REQUIRE(m.accept(doc.substr(i, 1)));
  }
  CHECK(m.finished());
  // At the start only '{' tokens; the stop token only at the end.
  g::Matcher start(gr);
  index.allowed(start, stops, got);
  CHECK(g::contains(got, 1));
  CHECK(g::contains(got, 9));
  CHECK_FALSE(g::contains(got, 3));
  CHECK_FALSE(g::contains(got, eos));
}

TEST_CASE("grammar: a string's room bounds the plain tokens allowed") {
  const std::vector<std::string> vocab = {"\"", "ab", "abcd", "a", "\"a", "\xC3\xA9\xC3\xA9\xC3\xA9"};
  g::TokenIndex index(vocab);
  const auto gr = schema(R"({"type": "string"})");
  g::Matcher m(gr);
  REQUIRE(m.accept("\"" + std::string(g::kMaxStringLength - 3, 'x')));
  g::TokenSet got;
  // '"', "ab", "a" and "ééé" (3 characters); not "abcd" (4 > 3 left), not "\"a"
  CHECK(index.allowed(m, {}, got) == 4);
  CHECK_FALSE(g::contains(got, 2));
  CHECK_FALSE(g::contains(got, 4));
  CHECK(g::contains(got, 5));
}

TEST_CASE("grammar: masked logits") {
  g::TokenSet allowed = {0b1010};
  std::vector<float> logits = {1, 2, 3, 4, 5};
  g::mask_logits(allowed, logits);
  CHECK(std::isinf(logits[0]));
  CHECK(logits[1] == 2);
  CHECK(std::isinf(logits[2]));
  CHECK(logits[3] == 4);
  CHECK(std::isinf(logits[4]));
}
