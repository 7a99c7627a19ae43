#include "engine/grammar/token_mask.hpp"

#include <algorithm>
#include <bit>
#include <bitset>
#include <limits>

namespace inferd::engine::grammar {
namespace {

// What a string's content takes without a trial: no closing quote, backslash
// (an escape) or control byte, and whole, well-formed UTF-8 characters only
// (the rules of Matcher: no overlong forms, surrogates, or past U+10FFFF).
bool plain(const std::string& b) {
  for (size_t i = 0; i < b.size();) {
    const auto c = static_cast<uint8_t>(b[i]);
    if (c < 0x80) {
      if (c < 0x20 || c == '"' || c == '\\') return false;
      ++i;
      continue;
    }
    if (c < 0xC2 || c > 0xF4) return false;
    const size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    if (i + len > b.size()) return false;
    const uint8_t lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
    const uint8_t hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
    for (size_t k = 1; k < len; ++k) {
      const auto cc = static_cast<uint8_t>(b[i + k]);
      if (cc < (k == 1 ? lo : 0x80) || cc > (k == 1 ? hi : 0xBF)) return false;
    }
    i += len;
  }
  return true;
}

// Characters a string's content gains from these bytes: continuation bytes add none.
size_t chars(const std::string& b) {
  return static_cast<size_t>(std::count_if(b.begin(), b.end(), [](char c) { return (static_cast<uint8_t>(c) & 0xC0) != 0x80; }));
}

void set(TokenSet& s, int32_t id) { s[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63); }
void clear(TokenSet& s, int32_t id) { s[static_cast<size_t>(id) >> 6] &= ~(uint64_t{1} << (id & 63)); }

}  // namespace

TokenIndex::TokenIndex(std::vector<std::string> bytes) : bytes_(std::move(bytes)) {
  plain_.assign((bytes_.size() + 63) / 64, 0);
  text_.assign((bytes_.size() + 63) / 64, 0);
  for (size_t i = 0; i < bytes_.size(); ++i) {
    const std::string& b = bytes_[i];
    if (b.empty()) continue;
    const auto id = static_cast<int32_t>(i);
    set(text_, id);
    std::bitset<256> in;
    for (char ch : b) {
      const auto c = static_cast<uint8_t>(ch);
      if (!in[c]) in.set(c), with_byte_[c].push_back(id);
    }
    by_first_[static_cast<uint8_t>(b[0])].push_back(id);
    if (plain(b)) {
      set(plain_, id);
      plain_by_length_.push_back(id);
      longest_plain_ = std::max(longest_plain_, chars(b));
    } else {
      not_plain_.push_back(id);
    }
  }
  // Second byte + 1, 0 for one-byte tokens: the order within a first-byte group.
  auto second = [&](int32_t id) {
    const std::string& b = bytes_[static_cast<size_t>(id)];
    return b.size() < 2 ? 0 : 1 + static_cast<int>(static_cast<uint8_t>(b[1]));
  };
  second_.resize(256);
  for (int f = 0; f < 256; ++f) {
    auto& group = by_first_[f];
    std::stable_sort(group.begin(), group.end(), [&](int32_t a, int32_t b) { return second(a) < second(b); });
    size_t i = 0;
    for (int k = 0; k <= 257; ++k) {
      while (i < group.size() && second(group[i]) < k) ++i;
      second_[static_cast<size_t>(f)][static_cast<size_t>(k)] = static_cast<uint32_t>(i);
    }
  }
  std::stable_sort(plain_by_length_.begin(), plain_by_length_.end(),
                   [&](int32_t a, int32_t b) { return chars(bytes_[static_cast<size_t>(a)]) < chars(bytes_[static_cast<size_t>(b)]); });
}

size_t TokenIndex::allowed(const Matcher& m, std::span<const int32_t> stop_ids, TokenSet& out) const {
  out.assign((bytes_.size() + 63) / 64, 0);
  const int room = m.string_room();
  const int tag = m.free_text_tag();
  if (tag >= 0) {
    // Free text: every token, but those with the tag's first byte only if they pass.
    out = text_;
    for (int32_t id : with_byte_[tag])
      if (!m.accepts(bytes(id))) clear(out, id);
  } else if (room >= 0) {
    // Inside a string: plain tokens that fit are allowed as they are; the rest are tried.
    if (static_cast<size_t>(room) >= longest_plain_) {
      out = plain_;
    } else {
      for (int32_t id : plain_by_length_) {
        if (chars(bytes(id)) > static_cast<size_t>(room)) break;
        set(out, id);
      }
    }
    for (int32_t id : not_plain_)
      if (m.accepts(bytes(id))) set(out, id);
  } else {
    for (int b = 0; b < 256; ++b) {
      const auto& group = by_first_[b];
      char two[2] = {static_cast<char>(b), 0};
      if (group.empty() || !m.accepts(std::string_view(two, 1))) continue;
      const auto& at = second_[static_cast<size_t>(b)];
      for (uint32_t i = at[0]; i < at[1]; ++i) set(out, group[i]);  // one byte: accepted
      for (int c = 0; c < 256; ++c) {
        const uint32_t begin = at[static_cast<size_t>(c) + 1], end = at[static_cast<size_t>(c) + 2];
        two[1] = static_cast<char>(c);
        if (begin == end || !m.accepts(std::string_view(two, 2))) continue;
        for (uint32_t i = begin; i < end; ++i)
          if (bytes(group[i]).size() == 2 || m.accepts(bytes(group[i]))) set(out, group[i]);
      }
    }
  }
  if (m.can_end())
    for (int32_t id : stop_ids)
      if (id >= 0 && static_cast<size_t>(id) < bytes_.size()) set(out, id);
  size_t n = 0;
  for (uint64_t w : out) n += static_cast<size_t>(std::popcount(w));
  return n;
}

void mask_logits(const TokenSet& allowed, std::span<float> logits) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const size_t n = std::min(logits.size(), allowed.size() * 64);
  for (size_t i = 0; i < n; ++i)
    if (!((allowed[i >> 6] >> (i & 63)) & 1)) logits[i] = kNegInf;
  for (size_t i = n; i < logits.size(); ++i) logits[i] = kNegInf;
}

}  // namespace inferd::engine::grammar
