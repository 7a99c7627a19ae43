#include "engine/jinja/parser.hpp"

#include <algorithm>
#include <charconv>

#include "engine/jinja/builtins.hpp"

namespace inferd::engine::jinja {

namespace {

// A number literal's value; one past its type's range is a syntax error
// (Python's integers would grow; these are int64 and double).
template <class T>
T number(const Token& t, const char* kind) {
  T v{};
  const auto [end, ec] = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
  if (ec != std::errc() || end != t.text.data() + t.text.size())
    throw SyntaxError(t.line, std::string(kind) + " literal " + t.text.substr(0, 40) + " is out of range");
  return v;
}

ExprPtr make(Expr::Kind kind, int line, std::string name = {}) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  e->name = std::move(name);
  return e;
}

Node node(Node::Kind kind, int line) {
  Node n;
  n.kind = kind;
  n.line = line;
  return n;
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  Program run() {
    Program p;
    p.body = body({});
    if (peek().kind != Token::End) throw SyntaxError(peek().line, "unexpected '{% " + tag_name() + " %}'");
    for (const auto& [name, line] : calls_)
      if (!has_global(name) && std::find(macros_.begin(), macros_.end(), name) == macros_.end())
        throw SyntaxError(line, "function '" + name + "' is not supported");
    p.names = std::move(names_);
    return p;
  }

 private:
  const Token& peek(size_t ahead = 0) const { return t_[std::min(pos_ + ahead, t_.size() - 1)]; }
  const Token& next() { return t_[std::min(pos_++, t_.size() - 1)]; }
  bool at_op(std::string_view op) const { return peek().kind == Token::Op && peek().text == op; }
  bool at_name(std::string_view n) const { return peek().kind == Token::Name && peek().text == n; }
  bool take_op(std::string_view op) {
    if (!at_op(op)) return false;
    ++pos_;
    return true;
  }
  bool take_name(std::string_view n) {
    if (!at_name(n)) return false;
    ++pos_;
    return true;
  }
  static std::string describe(const Token& t) {
    switch (t.kind) {
      case Token::BlockEnd: return "'%}'";
      case Token::VarEnd: return "'}}'";
      case Token::End: return "end of template";
      case Token::String: return "a string";
      default: return "'" + t.text + "'";
    }
  }
  void expect_op(std::string_view op) {
    if (!take_op(op)) throw SyntaxError(peek().line, "expected '" + std::string(op) + "', got " + describe(peek()));
  }
  std::string expect_name() {
    if (peek().kind != Token::Name) throw SyntaxError(peek().line, "expected a name, got " + describe(peek()));
    return next().text;
  }
  void expect(Token::Kind kind) {
    if (peek().kind != kind)
      throw SyntaxError(peek().line, std::string("expected ") + (kind == Token::BlockEnd ? "'%}'" : "'}}'") +
                                         ", got " + describe(peek()));
    ++pos_;
  }
  // The statement name after a {% at pos_.
  std::string tag_name() const { return peek().kind == Token::BlockBegin ? peek(1).text : peek().text; }

  // Statements until a {% tag %} named in `until` (left unread) or the end.
  Body body(std::initializer_list<std::string_view> until) {
    Body out;
    for (;;) {
      const Token& t = peek();
      const std::string closer = until.size() ? "'{% " + std::string(*(until.end() - 1)) + " %}'" : "";
      if (t.kind == Token::End) {
        if (until.size() != 0) throw SyntaxError(t.line, "missing " + closer);
        return out;
      }
      if (t.kind == Token::Text) {
        if (!t.text.empty()) out.push_back(text(t));
        ++pos_;
      } else if (t.kind == Token::VarBegin) {
        ++pos_;
        Node n = node(Node::Output, t.line);
        n.expr = expression();
        expect(Token::VarEnd);
        out.push_back(std::move(n));
      } else if (t.kind == Token::BlockBegin) {
        const std::string name = peek(1).text;
        if (std::find(until.begin(), until.end(), name) != until.end()) return out;
        if (name.starts_with("end") || name == "elif" || name == "else")
          throw SyntaxError(t.line, "unexpected '{% " + name + " %}'" + (closer.empty() ? "" : ", expected " + closer));
        pos_ += 2;
        out.push_back(statement(name, t.line));
      } else {
        throw SyntaxError(t.line, "unexpected " + describe(t));
      }
    }
  }

  static Node text(const Token& t) {
    Node n = node(Node::Text, t.line);
    n.text = t.text;
    return n;
  }

  void end_tag(std::string_view name) {
    expect(Token::BlockBegin);
    if (!take_name(name)) throw SyntaxError(peek().line, "expected '{% " + std::string(name) + " %}'");
    expect(Token::BlockEnd);
  }

  Node statement(const std::string& name, int line) {
    const Nested nested(*this, line);
    if (name == "if") return if_statement(line);
    if (name == "for") return for_statement(line);
    if (name == "set") return set_statement(line);
    if (name == "macro") return macro_statement(line);
    if (name == "break" || name == "continue") {
      if (loops_ == 0) throw SyntaxError(line, "'" + name + "' outside a for loop");
      expect(Token::BlockEnd);
      return node(name == "break" ? Node::Break : Node::Continue, line);
    }
    throw SyntaxError(line, "'{% " + name + " %}' is not supported");
  }

  Node if_statement(int line) {
    Node n = node(Node::If, line);
    ExprPtr cond = expression();
    for (;;) {
      expect(Token::BlockEnd);
      Body b = body({"elif", "else", "endif"});
      n.branches.emplace_back(std::move(cond), std::move(b));
      if (peek().kind != Token::BlockBegin) throw SyntaxError(peek().line, "missing '{% endif %}'");
      pos_ += 1;
      const std::string tag = next().text;
      if (tag == "elif") {
        cond = expression();
      } else if (tag == "else") {
        expect(Token::BlockEnd);
        n.branches.emplace_back(nullptr, body({"endif"}));
        end_tag("endif");
        return n;
      } else {
        expect(Token::BlockEnd);
        return n;
      }
    }
  }

  Node for_statement(int line) {
    Node n = node(Node::For, line);
    do n.targets.push_back(expect_name());
    while (take_op(","));
    if (!take_name("in")) throw SyntaxError(peek().line, "expected 'in', got " + describe(peek()));
    n.expr = expression(false);
    if (take_name("if")) n.filter = expression(false);
    if (take_name("recursive")) throw SyntaxError(line, "recursive for loops are not supported");
    expect(Token::BlockEnd);
    ++loops_;
    n.body = body({"else", "endfor"});
    --loops_;
    pos_ += 1;
    if (next().text == "else") {
      expect(Token::BlockEnd);
      n.else_body = body({"endfor"});
      end_tag("endfor");
    } else {
      expect(Token::BlockEnd);
    }
    return n;
  }

  Node set_statement(int line) {
    Node n = node(Node::Set, line);
    n.targets.push_back(expect_name());
    if (take_op(".")) {
      n.attribute = true;
      n.targets.push_back(expect_name());
      names_.insert(n.targets[0]);
    } else {
      while (take_op(",")) n.targets.push_back(expect_name());
    }
    if (peek().kind == Token::BlockEnd && n.targets.size() == 1) {
      ++pos_;
      n.kind = Node::SetBlock;
      n.body = body({"endset"});
      end_tag("endset");
      return n;
    }
    expect_op("=");
    n.expr = expression();
    expect(Token::BlockEnd);
    return n;
  }

  Node macro_statement(int line) {
    Node n = node(Node::Macro, line);
    n.targets.push_back(expect_name());
    expect_op("(");
    while (!take_op(")")) {
      n.targets.push_back(expect_name());
      n.defaults.push_back(take_op("=") ? expression() : nullptr);
      if (!at_op(")")) expect_op(",");
    }
    expect(Token::BlockEnd);
    macros_.push_back(n.targets[0]);
    n.body = body({"endmacro"});
    end_tag("endmacro");
    return n;
  }

  // Nesting deeper than any template needs is refused before it exhausts the stack.
  struct Nested {
    Nested(Parser& p, int line) : p(p) {
      if (++p.depth_ > 200) throw SyntaxError(line, "nested more than 200 deep");
    }
    ~Nested() { --p.depth_; }
    Parser& p;
  };

  // expression := or ['if' or ['else' expression]]
  ExprPtr expression(bool with_condition = true) {
    const Nested nested(*this, peek().line);
    ExprPtr e = or_expr();
    while (with_condition && at_name("if")) {
      auto c = make(Expr::Cond, next().line);
      c->kids.push_back(std::move(e));
      c->kids.push_back(or_expr());
      c->kids.push_back(take_name("else") ? expression() : nullptr);
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary(std::string op, ExprPtr a, ExprPtr b, int line) {
    auto e = make(Expr::Binary, line, std::move(op));
    e->kids.push_back(std::move(a));
    e->kids.push_back(std::move(b));
    return e;
  }

  // Left-associative operators of one precedence level over the next.
  ExprPtr chain(ExprPtr (Parser::*operand)(), std::initializer_list<std::string_view> ops) {
    ExprPtr e = (this->*operand)();
    for (;;) {
      const Token& t = peek();
      if ((t.kind != Token::Op && t.kind != Token::Name) || std::find(ops.begin(), ops.end(), t.text) == ops.end())
        return e;
      next();
      e = binary(t.text, std::move(e), (this->*operand)(), t.line);
    }
  }
  ExprPtr or_expr() { return chain(&Parser::and_expr, {"or"}); }
  ExprPtr and_expr() { return chain(&Parser::not_expr, {"and"}); }
  ExprPtr not_expr() {
    if (at_name("not")) {
      auto e = make(Expr::Unary, next().line, "not");
      e->kids.push_back(not_expr());
      return e;
    }
    return compare();
  }
  ExprPtr compare() {
    ExprPtr e = sum();
    for (;;) {
      const int line = peek().line;
      if (peek().kind == Token::Op && (at_op("==") || at_op("!=") || at_op("<") || at_op(">") || at_op("<=") ||
                                       at_op(">="))) {
        std::string op = next().text;
        e = binary(op, std::move(e), sum(), line);
      } else if (take_name("in")) {
        e = binary("in", std::move(e), sum(), line);
      } else if (at_name("not") && peek(1).kind == Token::Name && peek(1).text == "in") {
        pos_ += 2;
        e = binary("not in", std::move(e), sum(), line);
      } else {
        return e;
      }
    }
  }
  ExprPtr sum() { return chain(&Parser::concat, {"+", "-"}); }
  ExprPtr concat() { return chain(&Parser::product, {"~"}); }
  ExprPtr product() { return chain(&Parser::power, {"*", "/", "//", "%"}); }
  ExprPtr power() { return chain(&Parser::signed_operand, {"**"}); }
  ExprPtr signed_operand() { return unary(); }
  // As Jinja2: a sign takes the operand before its filters, so -1 | abs is 1.
  ExprPtr unary(bool with_filters = true) {
    const Nested nested(*this, peek().line);
    ExprPtr e;
    if (at_op("-") || at_op("+")) {
      const Token& t = next();
      e = make(Expr::Unary, t.line, t.text);
      e->kids.push_back(unary(false));
    } else {
      e = postfix(primary());
    }
    return with_filters ? filters(std::move(e)) : std::move(e);
  }

  ExprPtr primary() {
    const Token& t = next();
    switch (t.kind) {
      case Token::String: {
        auto e = make(Expr::Literal, t.line);
        std::string s = t.text;
        while (peek().kind == Token::String) s += next().text;  // adjacent literals join, as in Python
        e->value = Value(std::move(s));
        return e;
      }
      case Token::Int: {
        auto e = make(Expr::Literal, t.line);
        e->value = Value(number<int64_t>(t, "integer"));
        return e;
      }
      case Token::Float: {
        auto e = make(Expr::Literal, t.line);
        e->value = Value(number<double>(t, "float"));
        return e;
      }
      case Token::Name: {
        auto e = make(Expr::Literal, t.line);
        if (t.text == "true" || t.text == "True") e->value = true;
        else if (t.text == "false" || t.text == "False") e->value = false;
        else if (t.text == "none" || t.text == "None") e->value = None{};
        else {
          e = make(Expr::Name, t.line, t.text);
          names_.insert(t.text);
        }
        return e;
      }
      case Token::Op:
        if (t.text == "(") {
          if (take_op(")")) return literal_list(t.line);
          ExprPtr e = expression();
          if (at_op(",")) {
            auto l = make(Expr::ListOf, t.line, "tuple");
            l->kids.push_back(std::move(e));
            while (take_op(",") && !at_op(")")) l->kids.push_back(expression());
            e = std::move(l);
          }
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          auto l = make(Expr::ListOf, t.line);
          while (!take_op("]")) {
            l->kids.push_back(expression());
            if (!at_op("]")) expect_op(",");
          }
          return l;
        }
        if (t.text == "{") {
          auto d = make(Expr::DictOf, t.line);
          while (!take_op("}")) {
            d->kids.push_back(expression());
            expect_op(":");
            d->kids.push_back(expression());
            if (!at_op("}")) expect_op(",");
          }
          return d;
        }
        break;
      default: break;
    }
    throw SyntaxError(t.line, "unexpected " + describe(t) + " in an expression");
  }

  ExprPtr literal_list(int line) { return make(Expr::ListOf, line); }

  static bool test_takes_argument(std::string_view name) {
    for (std::string_view t : {"divisibleby", "sameas", "equalto", "eq", "ne", "lt", "gt", "le", "ge", "in"})
      if (name == t) return true;
    return false;
  }

  void arguments(Expr& e) {
    while (!take_op(")")) {
      if (peek().kind == Token::Name && peek(1).kind == Token::Op && peek(1).text == "=") {
        std::string key = next().text;
        next();
        e.kwargs.emplace_back(std::move(key), expression());
      } else {
        if (at_op("*") || at_op("**")) throw SyntaxError(peek().line, "'*' arguments are not supported");
        e.kids.push_back(expression());
      }
      if (!at_op(")")) expect_op(",");
    }
  }

  ExprPtr postfix(ExprPtr e) {
    for (;;) {
      const int line = peek().line;
      if (take_op(".")) {
        if (peek().kind == Token::Int) {  // messages.0 is messages[0]
          auto i = make(Expr::Item, line);
          i->kids.push_back(std::move(e));
          i->kids.push_back(primary());
          e = std::move(i);
        } else {
          auto a = make(Expr::Attr, line, expect_name());
          a->kids.push_back(std::move(e));
          e = std::move(a);
        }
      } else if (take_op("[")) {
        ExprPtr index[3];
        int colons = 0;
        while (!at_op("]")) {
          if (take_op(":")) {
            if (++colons > 2) throw SyntaxError(line, "a slice takes at most three parts");
          } else {
            if (index[colons]) expect_op("]");
            index[colons] = expression();
          }
        }
        expect_op("]");
        auto s = make(colons ? Expr::Slice : Expr::Item, line);
        s->kids.push_back(std::move(e));
        if (!colons && !index[0]) throw SyntaxError(line, "empty subscript");
        for (int i = 0; i < (colons ? 3 : 1); ++i) s->kids.push_back(std::move(index[i]));
        e = std::move(s);
      } else if (take_op("(")) {
        if (e->kind == Expr::Attr && !has_method(e->name))
          throw SyntaxError(line, "method '" + e->name + "' is not supported");
        if (e->kind == Expr::Name) calls_.emplace_back(e->name, line);
        else if (e->kind != Expr::Attr) throw SyntaxError(line, "calling an expression is not supported");
        auto c = make(Expr::CallOf, line);
        c->kids.push_back(std::move(e));
        arguments(*c);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  ExprPtr filters(ExprPtr e) {
    for (;;) {
      const int line = peek().line;
      if (take_op("|")) {
        auto f = make(Expr::Filter, line, expect_name());
        if (!has_filter(f->name)) throw SyntaxError(line, "filter '" + f->name + "' is not supported");
        f->kids.push_back(std::move(e));
        if (take_op("(")) arguments(*f);
        e = std::move(f);
      } else if (take_name("is")) {
        const bool negated = take_name("not");
        auto t = make(Expr::Test, line, expect_name());
        if (!has_test(t->name)) throw SyntaxError(line, "test '" + t->name + "' is not supported");
        t->negated = negated;
        t->kids.push_back(std::move(e));
        if (take_op("(")) {
          arguments(*t);
        } else if (test_takes_argument(t->name) && peek().kind != Token::BlockEnd && peek().kind != Token::VarEnd) {
          t->kids.push_back(postfix(primary()));  // `x is divisibleby 3`, `x is sameas none`
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  std::vector<Token> t_;
  size_t pos_ = 0;
  int loops_ = 0;
  int depth_ = 0;
  std::set<std::string> names_;
  std::vector<std::string> macros_;
  std::vector<std::pair<std::string, int>> calls_;
};

}  // namespace

Program parse(std::string_view source) { return Parser(lex(source)).run(); }

}  // namespace inferd::engine::jinja
