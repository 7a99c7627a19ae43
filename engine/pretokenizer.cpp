#include "engine/pretokenizer.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <spdlog/spdlog.h>

#include <array>
#include <memory>
#include <new>
#include <algorithm>
#include <utility>

namespace inferd::engine {
namespace {

// The GPT-2 split: contractions, letter runs, digit runs, other symbol runs,
// each with at most one leading space, and whitespace that is not followed by
// something else (so "  a" gives " " and " a").
constexpr const char* kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Llama 3: case-insensitive contractions, numbers in groups of up to three,
// newlines kept apart from other whitespace.
constexpr const char* kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Qwen 2: as Llama 3 but every digit on its own.
constexpr const char* kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// DeepSeek-V3 (also V3.2 and V4): numbers in groups of up to three, then CJK
// ideographs and kana runs, then a GPT-2-like split in which a punctuation
// character takes the ASCII letters after it and letters keep their marks.
constexpr const char* kDeepseek3Digits = R"(\p{N}{1,3})";
constexpr const char* kDeepseek3Cjk = "[一-龥぀-ゟ゠-ヿ]+";
constexpr const char* kDeepseek3 =
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Isolates every digit first; the GPT-2 split then runs inside each piece, so
// " 12" becomes " ", "1", "2" (StarCoder-derived vocabularies such as SmolLM).
constexpr const char* kDigits = R"(\p{N})";

struct Family {
  std::string_view name;
  std::vector<const char*> patterns;
  bool ignore_merges;
};

const std::array<Family, 16>& families() {
  static const std::array<Family, 16> table{{
      {"default", {kGpt2}, false},
      {"gpt2", {kGpt2}, false},
      {"gpt-2", {kGpt2}, false},
      {"phi-2", {kGpt2}, false},
      {"mpt", {kGpt2}, false},
      {"olmo", {kGpt2}, false},
      {"smollm", {kDigits, kGpt2}, false},
      {"starcoder", {kDigits, kGpt2}, false},
      {"refact", {kDigits, kGpt2}, false},
      {"command-r", {kDigits, kGpt2}, false},
      {"codeshell", {kDigits, kGpt2}, false},
      {"llama3", {kLlama3}, true},
      {"llama-bpe", {kLlama3}, true},
      {"qwen2", {kQwen2}, false},
      {"deepseek-r1-qwen", {kQwen2}, false},
      {"deepseek-v3", {kDeepseek3Digits, kDeepseek3Cjk, kDeepseek3}, false},
  }};
  return table;
}

}  // namespace

struct PreTokenizer::Pattern {
  pcre2_code* code = nullptr;
  explicit Pattern(const char* source) {
    int err = 0;
    PCRE2_SIZE at = 0;
    // UCP makes \s, \p{..} and friends Unicode-aware; MATCH_INVALID_UTF lets
    // arbitrary bytes through instead of failing the whole match.
    code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(source), PCRE2_ZERO_TERMINATED,
                         PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &at, nullptr);
    if (!code) {
      std::array<PCRE2_UCHAR, 256> msg{};
      pcre2_get_error_message(err, msg.data(), msg.size());
      throw std::logic_error("pre-tokenizer pattern does not compile at " + std::to_string(at) +
                             ": " + reinterpret_cast<const char*>(msg.data()));
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // an optimisation: the interpreter works too
  }
  ~Pattern() { pcre2_code_free(code); }
  Pattern(const Pattern&) = delete;
  Pattern& operator=(const Pattern&) = delete;
};

PreTokenizer::PreTokenizer(std::string_view name) : name_(name) {
  for (const Family& f : families()) {
    if (f.name != name) continue;
    ignore_merges_ = f.ignore_merges;
    for (const char* p : f.patterns) patterns_.push_back(std::make_unique<Pattern>(p));
    return;
  }
  std::string known;
  for (const Family& f : families()) known += (known.empty() ? "" : ", ") + std::string(f.name);
  throw std::invalid_argument("unsupported pre-tokenizer '" + std::string(name) + "' (known: " + known + ")");
}

std::string_view PreTokenizer::gpt2_pattern() { return kGpt2; }
std::string_view PreTokenizer::digits_pattern() { return kDigits; }

std::optional<std::string> PreTokenizer::family_of(std::span<const std::string> patterns) {
  // tokenizer.json files write a CR or LF in a regex either as the character
  // itself (DeepSeek's) or escaped; both mean the same to the regex engine.
  auto escaped = [](std::string_view p) {
    std::string out;
    for (char c : p) out += c == '\r' ? "\\r" : c == '\n' ? "\\n" : std::string(1, c);
    return out;
  };
  std::vector<std::string> given;
  for (const std::string& p : patterns) given.push_back(escaped(p));
  for (const Family& f : families()) {
    if (f.name == "default") continue;  // "gpt2" names the same patterns
    if (std::equal(f.patterns.begin(), f.patterns.end(), given.begin(), given.end(),
                   [](const char* a, const std::string& b) { return std::string_view(a) == b; }))
      return std::string(f.name);
  }
  return std::nullopt;
}

PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;

std::vector<std::string_view> PreTokenizer::split(std::string_view text) const {
  std::vector<std::string_view> pieces;
  if (!text.empty()) pieces.push_back(text);
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(
      pcre2_match_data_create(1, nullptr), &pcre2_match_data_free);
  if (!match) throw std::bad_alloc();
  pcre2_match_data* md = match.get();
  std::vector<std::string_view> next;
  for (const auto& pattern : patterns_) {
    next.clear();
    for (std::string_view piece : pieces) {
      // Each piece is its own subject, so lookarounds stop at its edges.
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
      size_t pos = 0, gap_start = 0;
      while (pos < piece.size()) {
        int rc = pcre2_match(pattern->code, subject, piece.size(), pos, 0, md, nullptr);
        if (rc < 0) {
          // The rest stays one piece: BPE still encodes it, only less finely.
          if (rc != PCRE2_ERROR_NOMATCH) spdlog::warn("pre-tokenizer '{}': match failed ({})", name_, rc);
          break;
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        size_t begin = ov[0], end = ov[1];
        if (begin > gap_start) next.push_back(piece.substr(gap_start, begin - gap_start));
        if (end == begin) {  // the patterns never match empty; guard the loop anyway
          pos = end + 1;
          gap_start = begin;
          continue;
        }
        next.push_back(piece.substr(begin, end - begin));
        pos = gap_start = end;
      }
      if (gap_start < piece.size()) next.push_back(piece.substr(gap_start));
    }
    pieces.swap(next);
  }
  return pieces;
}

}  // namespace inferd::engine
