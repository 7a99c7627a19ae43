#include "engine/jinja/lexer.hpp"

#include <cctype>

namespace inferd::engine::jinja {

namespace {

constexpr std::string_view kSpace = " \t\n\r\f\v";

bool is_name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// \r\n and \r become \n; one trailing newline goes (keep_trailing_newline off).
std::string normalise_newlines(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\r') {
      out += '\n';
      if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
    } else {
      out += s[i];
    }
  }
  if (out.ends_with('\n')) out.pop_back();
  return out;
}

void append_utf8(std::string& out, unsigned long cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

class Lexer {
 public:
  explicit Lexer(std::string src) : s_(std::move(src)) {}

  std::vector<Token> run() {
    size_t pos = 0;
    int strip_next = 0;  // 1: one newline (trim_blocks), 2: all whitespace (-%})
    while (pos < s_.size()) {
      size_t open = s_.find('{', pos);
      while (open != std::string::npos && open + 1 < s_.size() && !is_open(s_[open + 1])) open = s_.find('{', open + 1);
      if (open == std::string::npos || open + 1 >= s_.size()) open = s_.size();
      text(pos, open, strip_next);
      if (open == s_.size()) break;
      const char kind = s_[open + 1];
      size_t at = open + 2;
      const char left = at < s_.size() && (s_[at] == '-' || s_[at] == '+') ? s_[at++] : 0;
      strip_before(kind, left);
      if (kind == '#') {
        const size_t close = s_.find("#}", at);
        if (close == std::string::npos) throw SyntaxError(line_at(open), "comment not closed with '#}'");
        const char right = close > at && (s_[close - 1] == '-' || s_[close - 1] == '+') ? s_[close - 1] : 0;
        strip_next = right == '-' ? 2 : right == '+' ? 0 : 1;
        pos = close + 2;
        continue;
      }
      const int line = line_at(open);
      out_.push_back({kind == '%' ? Token::BlockBegin : Token::VarBegin, {}, line});
      char right = 0;
      pos = expression(at, kind, right);
      out_.push_back({kind == '%' ? Token::BlockEnd : Token::VarEnd, {}, line_at(pos)});
      strip_next = right == '-' ? 2 : (kind == '%' && right != '+') ? 1 : 0;
    }
    out_.push_back({Token::End, {}, line_at(s_.size())});
    return std::move(out_);
  }

 private:
  static bool is_open(char c) { return c == '{' || c == '%' || c == '#'; }

  int line_at(size_t pos) {
    for (; line_pos_ < pos && line_pos_ < s_.size(); ++line_pos_)
      if (s_[line_pos_] == '\n') ++line_;
    return line_;
  }

  void text(size_t begin, size_t end, int strip) {
    std::string t = s_.substr(begin, end - begin);
    size_t removed = 0;
    if (strip == 2) removed = std::min(t.size(), t.find_first_not_of(kSpace));
    else if (strip == 1 && t.starts_with('\n')) removed = 1;
    // lstrip_blocks asks whether this text starts a line: whether the source
    // consumed before it (the previous tag and what it stripped) ended one.
    text_line_start_ = removed ? t[removed - 1] == '\n' : begin == 0 || s_[begin - 1] == '\n';
    t.erase(0, removed);
    out_.push_back({Token::Text, std::move(t), line_at(begin)});
  }

  void strip_before(char kind, char left) {
    if (out_.empty() || out_.back().kind != Token::Text) return;
    std::string& t = out_.back().text;
    if (left == '-') {
      const size_t keep = t.find_last_not_of(kSpace);
      t.erase(keep == std::string::npos ? 0 : keep + 1);
    } else if (kind != '{' && left != '+') {
      const size_t nl = t.rfind('\n');
      const size_t from = nl == std::string::npos ? 0 : nl + 1;
      if ((nl != std::string::npos || text_line_start_) && from < t.size() &&
          t.find_first_not_of(" \t\f\v\r", from) == std::string::npos)
        t.erase(from);
    }
  }

  // Tokens until the tag's end; returns the position after it.
  size_t expression(size_t at, char kind, char& right) {
    const char close = kind == '%' ? '%' : '}';
    int depth = 0;  // open brackets: a '}' inside a dict literal does not close {{ }}
    for (;;) {
      while (at < s_.size() && kSpace.find(s_[at]) != std::string_view::npos) ++at;
      if (at >= s_.size()) throw SyntaxError(line_at(at), std::string("tag not closed with '") + close + "}'");
      const char c = s_[at];
      if (depth == 0 && (c == '-' || c == '+') && s_.compare(at + 1, 2, std::string{close, '}'}) == 0) {
        right = c;
        return at + 3;
      }
      if (depth == 0 && s_.compare(at, 2, std::string{close, '}'}) == 0) return at + 2;
      const int line = line_at(at);
      if (is_name_start(c)) {
        size_t e = at;
        while (e < s_.size() && is_name_char(s_[e])) ++e;
        out_.push_back({Token::Name, s_.substr(at, e - at), line});
        at = e;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t e = at;
        bool is_float = false;
        while (e < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[e])) || s_[e] == '_')) ++e;
        if (e + 1 < s_.size() && s_[e] == '.' && std::isdigit(static_cast<unsigned char>(s_[e + 1]))) {
          is_float = true;
          for (++e; e < s_.size() && std::isdigit(static_cast<unsigned char>(s_[e])); ++e) {}
        }
        if (e < s_.size() && (s_[e] == 'e' || s_[e] == 'E')) {  // 1e3, 1.5e-4
          size_t x = e + 1;
          if (x < s_.size() && (s_[x] == '+' || s_[x] == '-')) ++x;
          if (x < s_.size() && std::isdigit(static_cast<unsigned char>(s_[x]))) {
            is_float = true;
            for (e = x; e < s_.size() && std::isdigit(static_cast<unsigned char>(s_[e])); ++e) {}
          }
        }
        std::string num;
        for (size_t i = at; i < e; ++i)
          if (s_[i] != '_') num += s_[i];
        out_.push_back({is_float ? Token::Float : Token::Int, num, line});
        at = e;
      } else if (c == '\'' || c == '"') {
        at = string(at, line);
      } else {
        static constexpr std::string_view two[] = {"==", "!=", "<=", ">=", "//", "**"};
        std::string op(1, c);
        for (std::string_view t : two)
          if (s_.compare(at, 2, t) == 0) op = t;
        if (std::string_view("+-*/%~|.,:()[]{}=<>!").find(c) == std::string_view::npos)
          throw SyntaxError(line, std::string("unexpected character '") + c + "'");
        if (op == "(" || op == "[" || op == "{") ++depth;
        if ((op == ")" || op == "]" || op == "}") && depth > 0) --depth;
        out_.push_back({Token::Op, op, line});
        at += op.size();
      }
    }
  }

  // A quoted literal with Python's escapes.
  size_t string(size_t at, int line) {
    const char q = s_[at++];
    std::string v;
    for (;;) {
      if (at >= s_.size()) throw SyntaxError(line, "string literal not closed");
      char c = s_[at++];
      if (c == q) break;
      if (c != '\\') {
        v += c;
        continue;
      }
      if (at >= s_.size()) throw SyntaxError(line, "string literal not closed");
      c = s_[at++];
      switch (c) {
        case 'n': v += '\n'; break;
        case 't': v += '\t'; break;
        case 'r': v += '\r'; break;
        case '0': v += '\0'; break;
        case 'b': v += '\b'; break;
        case 'f': v += '\f'; break;
        case 'v': v += '\v'; break;
        case '\\': case '\'': case '"': v += c; break;
        case '\n': break;
        case 'x': case 'u': case 'U': {
          const size_t n = c == 'x' ? 2 : c == 'u' ? 4 : 8;
          if (at + n > s_.size()) throw SyntaxError(line, "truncated \\" + std::string(1, c) + " escape");
          const std::string hex = s_.substr(at, n);
          if (hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
            throw SyntaxError(line, "bad \\" + std::string(1, c) + " escape");
          const unsigned long cp = std::stoul(hex, nullptr, 16);  // at most 8 hex digits: fits
          if (cp > 0x10FFFF) throw SyntaxError(line, "\\" + std::string(1, c) + " escape past U+10FFFF");
          append_utf8(v, cp);
          at += n;
          break;
        }
        default: v += '\\'; v += c;  // Python keeps unknown escapes as written
      }
    }
    out_.push_back({Token::String, std::move(v), line});
    return at;
  }

  std::string s_;
  std::vector<Token> out_;
  bool text_line_start_ = true;
  size_t line_pos_ = 0;
  int line_ = 1;
};

}  // namespace

std::vector<Token> lex(std::string_view source) { return Lexer(normalise_newlines(source)).run(); }

}  // namespace inferd::engine::jinja
