#include "engine/sentencepiece_bpe.hpp"

#include <algorithm>
#include <limits>
#include <queue>

namespace inferd::engine::spm {
namespace {

constexpr std::string_view kMetaSpace = "\xE2\x96\x81";  // U+2581

// The length of the character a byte begins, read from its high bits alone: a
// continuation or malformed byte counts as one, a lead byte as its sequence
// (clipped at the end of the text), whatever follows it.
size_t char_length(unsigned char lead) {
  static constexpr size_t kByHighBits[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kByHighBits[lead >> 4];
}

// The characters of a text as encode() reads them: [begin, begin + size).
template <class Visit>
void for_each_char(std::string_view text, Visit visit) {
  for (size_t at = 0; at < text.size();) {
    const size_t n = std::min(char_length(static_cast<unsigned char>(text[at])), text.size() - at);
    visit(at, n);
    at += n;
  }
}

}  // namespace

std::string escape_spaces(std::string_view text, bool space_prefix) {
  std::string out;
  out.reserve(text.size() + text.size() / 4 + 3);
  if (space_prefix) out += kMetaSpace;
  for (char c : text) {
    if (c == ' ') out += kMetaSpace;
    else out += c;
  }
  return out;
}

std::string unescape_spaces(std::string_view token_text) {
  std::string out;
  out.reserve(token_text.size());
  for (size_t i = 0; i < token_text.size();) {
    if (token_text.substr(i, kMetaSpace.size()) == kMetaSpace) {
      out += ' ';
      i += kMetaSpace.size();
    } else {
      out += token_text[i++];
    }
  }
  return out;
}

void encode(std::string_view escaped, const Vocab& vocab, std::vector<int32_t>& out) {
  // One symbol per character in a linked list; a merge folds the right symbol
  // into the left one (its size becomes 0).
  struct Symbol {
    size_t begin, size;
    int32_t prev, next;
  };
  std::vector<Symbol> sym;
  sym.reserve(escaped.size());
  for_each_char(escaped, [&](size_t at, size_t n) {
    const auto index = static_cast<int32_t>(sym.size());
    sym.push_back({at, n, index - 1, at + n < escaped.size() ? index + 1 : -1});
  });

  // Candidate merges wait in a queue, best score first and leftmost among
  // equals. A candidate whose sides have changed since (one was merged away or
  // grew) no longer adds up to its size and is dropped when it comes out.
  struct Candidate {
    float score;
    int32_t left, right;
    size_t size;
  };
  auto worse = [](const Candidate& a, const Candidate& b) {
    return a.score != b.score ? a.score < b.score : a.left > b.left;
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(worse)> queue(worse);
  auto consider = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const size_t size = sym[left].size + sym[right].size;
    auto it = vocab.ids.find(escaped.substr(sym[left].begin, size));
    if (it == vocab.ids.end()) return;
    const auto id = static_cast<size_t>(it->second);
    const float score = id < vocab.scores.size() ? vocab.scores[id] : 0.0f;
    if (score == -std::numeric_limits<float>::infinity()) return;  // a token no merge makes
    queue.push({score, left, right, size});
  };
  for (size_t i = 1; i < sym.size(); ++i) consider(static_cast<int32_t>(i - 1), static_cast<int32_t>(i));

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& l = sym[c.left];
    Symbol& r = sym[c.right];
    if (l.size == 0 || r.size == 0 || l.size + r.size != c.size) continue;
    l.size += r.size;
    r.size = 0;
    l.next = r.next;
    if (l.next >= 0) sym[l.next].prev = c.left;
    consider(l.prev, c.left);
    consider(c.left, l.next);
  }

  // Every merged symbol is a token; a single character may not be, and is
  // spelled byte by byte.
  for (int32_t i = sym.empty() ? -1 : 0; i >= 0; i = sym[i].next) {
    const std::string_view text = escaped.substr(sym[i].begin, sym[i].size);
    if (auto it = vocab.ids.find(text); it != vocab.ids.end()) {
      out.push_back(it->second);
      continue;
    }
    for (unsigned char b : text) {
      const int32_t id = vocab.byte_tokens[b] >= 0 ? vocab.byte_tokens[b] : vocab.unknown;
      if (id >= 0) out.push_back(id);
    }
  }
}

std::optional<uint8_t> byte_token_value(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return std::nullopt;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  int hi = hex(text[3]), lo = hex(text[4]);
  if (hi < 0 || lo < 0) return std::nullopt;
  return static_cast<uint8_t>(hi * 16 + lo);
}

bool words_are_separate(std::span<const std::string> tokens) {
  for (std::string_view t : tokens) {
    while (t.starts_with(kMetaSpace)) t.remove_prefix(kMetaSpace.size());
    if (t.find(kMetaSpace) != std::string_view::npos) return false;
  }
  return true;
}

std::vector<std::string_view> words(std::string_view escaped) {
  // Cut at character boundaries as encode() reads them: a malformed lead byte
  // may take a "▁" into its character, and then that "▁" starts nothing.
  std::vector<std::string_view> out;
  size_t start = 0;
  bool after_space = true;  // the previous character was "▁" (or there was none)
  for_each_char(escaped, [&](size_t at, size_t n) {
    const bool space = escaped.substr(at, n) == kMetaSpace;
    if (space && !after_space && at > start) {
      out.push_back(escaped.substr(start, at - start));
      start = at;
    }
    after_space = space;
  });
  if (start < escaped.size()) out.push_back(escaped.substr(start));
  return out;
}

}  // namespace inferd::engine::spm
