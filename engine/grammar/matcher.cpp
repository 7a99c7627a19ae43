#include "engine/grammar/matcher.hpp"

#include <algorithm>
#include <bit>

namespace inferd::engine::grammar {
namespace {

// Phases per kind; 0 is "nothing read yet" for all.
enum : uint8_t { kStart = 0 };
enum : uint8_t { kObjOpen = 1, kObjKey, kObjColon, kObjValue, kObjNext, kObjComma };
enum : uint8_t { kArrOpen = 1, kArrNext, kArrComma };
enum : uint8_t { kStrBody = 1, kStrEscape, kStrHex };
enum : uint8_t { kNumSign = 1, kNumZero, kNumInt, kNumDot, kNumFrac };
enum : uint8_t { kLitMatch = 1 };
enum : uint8_t { kPartsBegun = 1 };  // Sequence and Repeat: count parts or items begun

// What a frame did with a byte: took it, refused it, or left it for the frame
// now on top (a value that ended before it, a child just pushed, a union resolved).
enum class Outcome { Take, Reject, Again };

Frame fresh(int node) { return Frame{node, kStart, false, 0, 0, -1, 0, 0}; }

bool digit(uint8_t c) { return c >= '0' && c <= '9'; }
bool hex_digit(uint8_t c) { return digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
uint64_t bit(int i) { return uint64_t{1} << i; }
uint64_t first_n(size_t n) { return n >= 64 ? ~uint64_t{0} : bit(static_cast<int>(n)) - 1; }

// The stack during a trial run: the committed frames below, read-only, and the
// frames this run changed or pushed above them, so a trial copies only what it
// touches and needs no allocation.
class Cursor {
 public:
  explicit Cursor(const std::vector<Frame>& base) : base_(base.data()), base_len_(base.size()) {}
  bool empty() const { return n_ == 0 && base_len_ == 0; }
  Frame& top() {  // copied up on first touch
    if (n_ == 0) {
      over_[0] = base_[--base_len_];
      n_ = 1;
    }
    return over_[n_ - 1];
  }
  void pop() { n_ > 0 ? --n_ : --base_len_; }
  bool push(const Frame& f) {
    if (base_len_ + n_ >= static_cast<size_t>(kMaxDepth)) return false;
    over_[n_++] = f;
    return true;
  }
  void commit(std::vector<Frame>& stack) const {
    stack.resize(base_len_);
    stack.insert(stack.end(), over_, over_ + n_);
  }

 private:
  const Frame* base_;
  size_t base_len_;
  Frame over_[kMaxDepth];  // uninitialized until pushed: a trial starts for free
  size_t n_ = 0;
};

// Keys the object may write next: unseen ones; in declared order, those after the
// last one written, up to and including the first required one.
uint64_t next_keys(const Frame& f, const Node& n) {
  const uint64_t all = first_n(n.properties.size());
  if (!n.ordered) return all & ~f.seen;
  const int next = f.seen ? 64 - std::countl_zero(f.seen) : 0;
  uint64_t keys = 0;
  for (int i = next; i < static_cast<int>(n.properties.size()); ++i) {
    keys |= bit(i);
    if (n.required & bit(i)) break;
  }
  return keys;
}

class Run {
 public:
  Run(const Grammar& g, Cursor& s) : g_(g), s_(s) {}

  bool step(uint8_t c) {
    // Each pass takes or refuses the byte, or pops a frame, resolves a union or
    // pushes a child, so the passes are bounded by depth and node count.
    for (size_t pass = 0; pass < 4 * static_cast<size_t>(kMaxDepth) + g_.nodes.size(); ++pass) {
      if (s_.empty()) return false;
      Frame& f = s_.top();
      const Node& n = g_.nodes[static_cast<size_t>(f.node)];
      Outcome o = Outcome::Reject;
      switch (n.kind) {
        case Kind::Object: o = object(f, n, c); break;
        case Kind::Array: o = array(f, n, c); break;
        case Kind::String: o = string(f, n, c); break;
        case Kind::Number:
        case Kind::Integer: o = number(f, n, c); break;
        case Kind::Literals: o = literals(f, n, c); break;
        case Kind::Union: o = choose(f, n, c); break;
        case Kind::Sequence: o = sequence(f, n); break;
        case Kind::Tagged: o = tagged(f, n, c); break;
        case Kind::Repeat: o = repeat(f, n, c); break;
        case Kind::Text: o = text(f, n, c); break;
      }
      if (o != Outcome::Again) return o == Outcome::Take;
    }
    return false;
  }

 private:
  Outcome child(int node) { return s_.push(fresh(node)) ? Outcome::Again : Outcome::Reject; }
  Outcome done() {
    s_.pop();
    return Outcome::Take;
  }

  Outcome object(Frame& f, const Node& n, uint8_t c) {
    const bool free_keys = n.properties.empty() && n.values >= 0;
    switch (f.phase) {
      case kStart:
        if (c != '{') return Outcome::Reject;
        f.phase = kObjOpen;
        return Outcome::Take;
      case kObjOpen:
        if (c == '}') return n.required ? Outcome::Reject : done();
        return c == '"' ? begin_key(f, n, free_keys) : Outcome::Reject;
      case kObjComma:
        if (c == ' ' && !f.space) return f.space = true, Outcome::Take;
        return c == '"' ? begin_key(f, n, free_keys) : Outcome::Reject;
      case kObjKey: {
        uint64_t left = 0;
        for (uint64_t k = f.keys; k; k &= k - 1) {
          const int i = std::countr_zero(k);
          const std::string& key = n.properties[static_cast<size_t>(i)].key;
          if (static_cast<size_t>(f.count) < key.size() && static_cast<uint8_t>(key[static_cast<size_t>(f.count)]) == c)
            left |= bit(i);
        }
        if (!left) return Outcome::Reject;
        f.keys = left;
        ++f.count;
        // Keys are quoted, so none is a prefix of another: one that just ended is the only one left.
        const int i = std::countr_zero(left);
        if (std::popcount(left) == 1 && n.properties[static_cast<size_t>(i)].key.size() == static_cast<size_t>(f.count)) {
          f.prop = i;
          f.seen |= bit(i);
          f.phase = kObjColon;
        }
        return Outcome::Take;
      }
      case kObjColon:
        if (c != ':') return Outcome::Reject;
        f.phase = kObjValue;
        f.space = false;
        return Outcome::Take;
      case kObjValue:
        if (c == ' ' && !f.space) return f.space = true, Outcome::Take;
        f.phase = kObjNext;
        return child(free_keys ? n.values : n.properties[static_cast<size_t>(f.prop)].value);
      case kObjNext:
        if (c == ',') {
          if (!free_keys && !next_keys(f, n)) return Outcome::Reject;
          f.phase = kObjComma;
          f.space = false;
          return Outcome::Take;
        }
        if (c == '}') return (f.seen & n.required) == n.required ? done() : Outcome::Reject;
        return Outcome::Reject;
    }
    return Outcome::Reject;
  }

  Outcome begin_key(Frame& f, const Node& n, bool free_keys) {
    if (free_keys) {
      f.phase = kObjColon;
      return child(g_.string_node);  // re-reads the '"'
    }
    f.keys = next_keys(f, n);
    if (!f.keys) return Outcome::Reject;
    f.count = 1;  // the opening quote, each key's first byte
    f.phase = kObjKey;
    return Outcome::Take;
  }

  Outcome array(Frame& f, const Node& n, uint8_t c) {
    switch (f.phase) {
      case kStart:
        if (c != '[') return Outcome::Reject;
        f.phase = kArrOpen;
        return Outcome::Take;
      case kArrOpen:
        if (c == ']') return n.min_items > 0 ? Outcome::Reject : done();
        if (n.max_items == 0) return Outcome::Reject;
        f.count = 1;
        f.phase = kArrNext;
        return child(n.items);
      case kArrNext:
        if (c == ',') {
          if (n.max_items >= 0 && f.count >= n.max_items) return Outcome::Reject;
          f.phase = kArrComma;
          f.space = false;
          return Outcome::Take;
        }
        if (c == ']') return f.count >= n.min_items ? done() : Outcome::Reject;
        return Outcome::Reject;
      case kArrComma:
        if (c == ' ' && !f.space) return f.space = true, Outcome::Take;
        ++f.count;
        f.phase = kArrNext;
        return child(n.items);
    }
    return Outcome::Reject;
  }

  // Counts characters (code points; an escape is one).
  Outcome string(Frame& f, const Node& n, uint8_t c) {
    switch (f.phase) {
      case kStart:
        if (c != '"') return Outcome::Reject;
        f.phase = kStrBody;
        f.hex = 0;
        return Outcome::Take;
      case kStrBody:
        if (f.hex > 0) {  // inside a multi-byte character: its next byte must be in range
          if (c < (f.prop >> 8) || c > (f.prop & 0xFF)) return Outcome::Reject;
          --f.hex;
          f.prop = 0x80BF;
          return Outcome::Take;
        }
        if (c == '"') return f.count >= n.min_length ? done() : Outcome::Reject;
        if (c < 0x20 || f.count >= n.max_length || (c == '<' && n.no_angle)) return Outcome::Reject;
        if (c >= 0x80) return utf8_lead(f, c);
        if (c == '\\') f.phase = kStrEscape;
        else ++f.count;
        return Outcome::Take;
      case kStrEscape:
        if (c == 'u') {
          f.phase = kStrHex;
          f.hex = 0;
          return Outcome::Take;
        }
        for (char e : {'"', '\\', '/', 'b', 'f', 'n', 'r', 't'})
          if (c == static_cast<uint8_t>(e)) {
            f.phase = kStrBody;
            ++f.count;
            return Outcome::Take;
          }
        return Outcome::Reject;
      case kStrHex:
        if (!hex_digit(c)) return Outcome::Reject;
        // No escaped UTF-16 surrogates (D800 to DFFF): a lone one is refused by
        // strict JSON parsers, and characters past U+FFFF can be written as UTF-8.
        if (f.hex == 0) f.prop = c;
        if (f.hex == 1 && (f.prop == 'd' || f.prop == 'D') && !(c >= '0' && c <= '7')) return Outcome::Reject;
        if (++f.hex == 4) {
          f.phase = kStrBody;
          f.hex = 0;
          ++f.count;
        }
        return Outcome::Take;
    }
    return Outcome::Reject;
  }

  // Well-formed UTF-8 only (no overlong forms, surrogates or code points past
  // U+10FFFF), so the text is exactly what the client receives and lengths
  // count as a validator counts them. f.hex: continuation bytes still due;
  // f.prop: the range of the next one (low byte << 8 | high byte).
  static Outcome utf8_lead(Frame& f, uint8_t c) {
    if (c < 0xC2 || c > 0xF4) return Outcome::Reject;
    ++f.count;
    f.hex = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : 1;
    f.prop = c == 0xE0 ? 0xA0BF : c == 0xED ? 0x809F : c == 0xF0 ? 0x90BF : c == 0xF4 ? 0x808F : 0x80BF;
    return Outcome::Take;
  }

  // A number ends where a byte that cannot continue it begins what follows.
  Outcome number(Frame& f, const Node& n, uint8_t c) {
    const bool fraction = n.kind == Kind::Number;
    switch (f.phase) {
      case kStart:
        if (c == '-') return f.phase = kNumSign, Outcome::Take;
        [[fallthrough]];
      case kNumSign:
        if (c == '0') return f.phase = kNumZero, Outcome::Take;
        if (!digit(c)) return Outcome::Reject;
        f.phase = kNumInt;
        f.count = 1;
        return Outcome::Take;
      case kNumZero:
      case kNumInt:
        if (digit(c)) {
          if (f.phase == kNumZero || f.count >= kMaxIntegerDigits) return Outcome::Reject;
          ++f.count;
          return Outcome::Take;
        }
        if (c == '.' && fraction) return f.phase = kNumDot, Outcome::Take;
        s_.pop();
        return Outcome::Again;
      case kNumDot:
        if (!digit(c)) return Outcome::Reject;
        f.phase = kNumFrac;
        f.count = 1;
        return Outcome::Take;
      case kNumFrac:
        if (digit(c)) return f.count >= kMaxFractionDigits ? Outcome::Reject : (++f.count, Outcome::Take);
        s_.pop();
        return Outcome::Again;
    }
    return Outcome::Reject;
  }

  // The literals still matching narrow with each byte; one that is whole ends
  // the value once no longer one continues (1 and 10 both listed: "1" waits).
  Outcome literals(Frame& f, const Node& n, uint8_t c) {
    if (f.phase == kStart) {
      f.phase = kLitMatch;
      f.seen = first_n(n.literals.size());
      f.count = 0;
    }
    const size_t at = static_cast<size_t>(f.count);
    uint64_t left = 0;
    bool whole = false;
    for (uint64_t k = f.seen; k; k &= k - 1) {
      const std::string& lit = n.literals[static_cast<size_t>(std::countr_zero(k))];
      if (lit.size() == at) whole = true;
      else if (static_cast<uint8_t>(lit[at]) == c) left |= k & -k;
    }
    if (!left) {
      if (!whole) return Outcome::Reject;
      s_.pop();
      return Outcome::Again;
    }
    f.seen = left;
    ++f.count;
    for (uint64_t k = left; k; k &= k - 1)
      if (n.literals[static_cast<size_t>(std::countr_zero(k))].size() > at + 1) return Outcome::Take;
    return done();  // whole, and nothing longer matches
  }

  // Each part begins where the one before ended; the byte goes to the part.
  // The last part takes the sequence's frame, so a sequence that ends in a
  // loop back (free text, a call, free text, ...) does not deepen the stack.
  Outcome sequence(Frame& f, const Node& n) {
    f.phase = kPartsBegun;
    const size_t at = static_cast<size_t>(f.count);
    if (at + 1 == n.options.size()) {
      f = fresh(n.options[at]);
      return Outcome::Again;
    }
    if (at < n.options.size()) return ++f.count, child(n.options[at]);
    s_.pop();  // no parts: the byte is for what follows
    return Outcome::Again;
  }

  // Any byte; the tag, once written whole, ends the text and the frame becomes
  // the node after it. f.count: how much of the tag the text now ends with.
  static Outcome text(Frame& f, const Node& n, uint8_t c) {
    const std::string& tag = n.literals[0];
    size_t k = static_cast<size_t>(f.count);
    f.phase = kLitMatch;
    if (static_cast<uint8_t>(tag[k]) == c) {
      ++k;
    } else {
      // The longest start of the tag that the text (tag[0, k) then c) ends with.
      size_t j = k;
      for (; j > 0; --j)
        if (static_cast<uint8_t>(tag[j - 1]) == c && tag.compare(0, j - 1, tag, k - j + 1, j - 1) == 0) break;
      k = j;
    }
    if (k == tag.size()) f = fresh(n.options[0]);
    else f.count = static_cast<int32_t>(k);
    return Outcome::Take;
  }

  // A head matched like a literal; the head that ends is the only one left
  // (none is a prefix of another), and the frame becomes the node it selects.
  Outcome tagged(Frame& f, const Node& n, uint8_t c) {
    if (f.phase == kStart) {
      f.phase = kLitMatch;
      f.seen = first_n(n.literals.size());
      f.count = 0;
    }
    const size_t at = static_cast<size_t>(f.count);
    uint64_t left = 0;
    for (uint64_t k = f.seen; k; k &= k - 1) {
      const std::string& head = n.literals[static_cast<size_t>(std::countr_zero(k))];
      if (at < head.size() && static_cast<uint8_t>(head[at]) == c) left |= k & -k;
    }
    if (!left) return Outcome::Reject;
    f.seen = left;
    ++f.count;
    const int i = std::countr_zero(left);
    if (n.literals[static_cast<size_t>(i)].size() == at + 1) f = fresh(n.options[static_cast<size_t>(i)]);
    return Outcome::Take;
  }

  // Another item when the byte can begin one and the bound allows; otherwise
  // the repetition ends before the byte, if it has enough items.
  Outcome repeat(Frame& f, const Node& n, uint8_t c) {
    if (f.phase == kStart) {
      f.phase = kPartsBegun;
      f.count = 1;
      return child(n.items);
    }
    if ((n.max_items < 0 || f.count < n.max_items) && g_.nodes[static_cast<size_t>(n.values)].first[c]) {
      ++f.count;
      return child(n.values);
    }
    if (f.count < n.min_items) return Outcome::Reject;
    s_.pop();
    return Outcome::Again;
  }

  Outcome choose(Frame& f, const Node& n, uint8_t c) {
    for (int o : n.options)
      if (g_.nodes[static_cast<size_t>(o)].first[c]) {
        f.node = o;
        return Outcome::Again;
      }
    return Outcome::Reject;
  }

  const Grammar& g_;
  Cursor& s_;
};

// The frame's value may end here, its inner values (the frames above it) ending too.
bool whole(const Grammar& g, const Frame& f) {
  const Node& n = g.nodes[static_cast<size_t>(f.node)];
  switch (n.kind) {
    case Kind::Sequence:  // the parts not yet begun may be empty (free text); no parts: nothing to write
      if (n.options.empty()) return true;
      if (f.phase != kPartsBegun) return false;
      for (size_t i = static_cast<size_t>(f.count); i < n.options.size(); ++i)
        if (g.nodes[static_cast<size_t>(n.options[i])].kind != Kind::Text) return false;
      return true;
    case Kind::Text: return true;
    case Kind::Repeat: return f.phase == kPartsBegun && f.count >= n.min_items;
    case Kind::Number:
    case Kind::Integer: return f.phase == kNumZero || f.phase == kNumInt || f.phase == kNumFrac;
    case Kind::Literals:
      if (f.phase != kLitMatch) return false;
      for (uint64_t k = f.seen; k; k &= k - 1)
        if (n.literals[static_cast<size_t>(std::countr_zero(k))].size() == static_cast<size_t>(f.count)) return true;
      return false;
    default: return false;
  }
}

}  // namespace

Matcher::Matcher(std::shared_ptr<const Grammar> grammar) : g_(std::move(grammar)) {
  stack_.reserve(kMaxDepth);
  stack_.push_back(fresh(g_->root));
}

bool Matcher::accepts(std::string_view bytes) const {
  Cursor s(stack_);
  Run run(*g_, s);
  for (char c : bytes)
    if (!run.step(static_cast<uint8_t>(c))) return false;
  return true;
}

bool Matcher::accept(std::string_view bytes) {
  Cursor s(stack_);
  Run run(*g_, s);
  for (char c : bytes)
    if (!run.step(static_cast<uint8_t>(c))) return false;
  s.commit(stack_);
  return true;
}

// Objects, arrays and strings end with a byte of their own, so below a value in
// progress only a sequence (the rest of its parts free text) or a repetition
// can end with it.
bool Matcher::can_end() const {
  return std::all_of(stack_.begin(), stack_.end(), [&](const Frame& f) { return whole(*g_, f); });
}

bool Matcher::finished() const {
  if (!can_end()) return false;
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    if (accepts(std::string_view(&c, 1))) return false;
  }
  return true;
}

int Matcher::string_room() const {
  if (stack_.empty()) return -1;
  const Frame& f = stack_.back();
  const Node& n = g_->nodes[static_cast<size_t>(f.node)];
  if (n.kind != Kind::String || f.phase != kStrBody || f.hex > 0) return -1;
  return n.max_length - f.count;
}

int Matcher::free_text_tag() const {
  if (stack_.empty()) return -1;
  const Frame& f = stack_.back();
  const Node& n = g_->nodes[static_cast<size_t>(f.node)];
  if (n.kind != Kind::Text || f.count != 0) return -1;
  return static_cast<uint8_t>(n.literals[0][0]);
}

}  // namespace inferd::engine::grammar
