// UTF-8 well-formedness after Unicode Table 3-7 (no overlongs, no surrogates,
// nothing above U+10FFFF). Text from clients and from token bytes crosses here.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace inferd::engine::utf8 {

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

enum class Status { Complete, Truncated, Invalid };

struct Sequence {
  Status status;
  size_t length;  // Complete: the character; Truncated: the bytes present;
                  // Invalid: the maximal ill-formed subpart (at least 1)
};

// Classifies the bytes at s[i] (i < s.size()). Truncated means s ends inside a
// character that more bytes could still complete.
inline Sequence classify(std::string_view s, size_t i) {
  auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) return {Status::Complete, 1};
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b >= 0xC2 && b <= 0xDF) need = 1;
  else if (b == 0xE0) need = 2, lo = 0xA0;
  else if (b == 0xED) need = 2, hi = 0x9F;
  else if (b >= 0xE1 && b <= 0xEF) need = 2;
  else if (b == 0xF0) need = 3, lo = 0x90;
  else if (b == 0xF4) need = 3, hi = 0x8F;
  else if (b >= 0xF1 && b <= 0xF3) need = 3;
  else return {Status::Invalid, 1};
  for (size_t k = 1; k <= need; ++k) {
    if (i + k >= s.size()) return {Status::Truncated, k};
    auto c = static_cast<unsigned char>(s[i + k]);
    if (c < (k == 1 ? lo : 0x80) || c > (k == 1 ? hi : 0xBF)) return {Status::Invalid, k};
  }
  return {Status::Complete, need + 1};
}

inline bool is_valid(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    Sequence q = classify(s, i);
    if (q.status != Status::Complete) return false;
    i += q.length;
  }
  return true;
}

inline void append_codepoint(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Decodes the character at s[i]; returns its length, or 0 if it is not well formed.
inline size_t decode(std::string_view s, size_t i, uint32_t& cp) {
  Sequence q = classify(s, i);
  if (q.status != Status::Complete) return 0;
  auto b = static_cast<unsigned char>(s[i]);
  cp = q.length == 1 ? b : b & (0x7F >> q.length);
  for (size_t k = 1; k < q.length; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return q.length;
}

// Well-formed text with every maximal ill-formed subpart replaced by U+FFFD (as
// Python's errors="replace" does).
inline std::string to_valid(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    Sequence q = classify(s, i);
    if (q.status == Status::Complete) out.append(s.substr(i, q.length));
    else out.append(kReplacement);
    i += q.length;
  }
  return out;
}

}  // namespace inferd::engine::utf8
