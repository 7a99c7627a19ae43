// A parsed template: statements (Node) holding expressions (Expr).
#pragma once
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "engine/jinja/value.hpp"

namespace inferd::engine::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum Kind {
    Literal,  // value
    Name,     // name
    ListOf,   // kids: items; name "tuple" for (a, b)
    DictOf,   // kids: key, value, key, value, ...
    Attr,     // kids[0].name
    Item,     // kids[0][kids[1]]
    Slice,    // kids[0][kids[1]:kids[2]:kids[3]], any of the three null
    CallOf,   // kids[0](kids[1..], kwargs)
    Filter,   // kids[0] | name(kids[1..], kwargs)
    Test,     // kids[0] is [not] name(kids[1..])
    Unary,    // name: not, -, +
    Binary,   // name: the operator
    Cond,     // kids[0] if kids[1] else kids[2] (null: undefined)
  };
  Kind kind;
  int line;
  std::string name;
  Value value;
  std::vector<ExprPtr> kids;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  bool negated = false;  // Test: `is not`
};

struct Node;
using Body = std::vector<Node>;

struct Node {
  enum Kind {
    Text,      // text
    Output,    // {{ expr }}
    If,        // branches: (condition, body), the else branch's condition null
    For,       // for targets in expr [if filter]: body [else: else_body]
    Set,       // set targets = expr; attribute: targets are namespace, attribute
    SetBlock,  // set targets[0]: body
    Macro,     // macro targets[0](targets[1..] = defaults): body
    Break,
    Continue,
  };
  Kind kind = Text;
  int line = 0;
  std::string text;
  ExprPtr expr;
  std::vector<std::string> targets;
  bool attribute = false;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body, else_body;
  ExprPtr filter;
  std::vector<ExprPtr> defaults;
};

struct Program {
  Body body;
  std::set<std::string> names;  // every variable name the template reads
};

}  // namespace inferd::engine::jinja
