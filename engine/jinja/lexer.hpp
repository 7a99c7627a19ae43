// Jinja2 source as tokens, with the whitespace rules transformers renders chat
// templates with: trim_blocks (the newline after a block tag goes),
// lstrip_blocks (spaces before a block tag on its line go), `{%-`/`-%}` and
// `{{-`/`-}}` (all whitespace on that side goes), newlines normalised to \n and
// one trailing newline dropped.
#pragma once
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace inferd::engine::jinja {

// A template Jinja2 would not accept, or one using what this engine does not
// implement; what() starts with "line N: ".
struct SyntaxError : std::invalid_argument {
  SyntaxError(int line, const std::string& what) : std::invalid_argument("line " + std::to_string(line) + ": " + what) {}
};

struct Token {
  enum Kind {
    Text,        // template text between tags
    BlockBegin,  // {%
    BlockEnd,    // %}
    VarBegin,    // {{
    VarEnd,      // }}
    Name,
    String,  // the literal's value, escapes decoded
    Int,
    Float,
    Op,  // operators and punctuation
    End,
  };
  Kind kind;
  std::string text;
  int line;
};

std::vector<Token> lex(std::string_view source);

}  // namespace inferd::engine::jinja
