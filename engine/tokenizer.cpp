#include "engine/tokenizer.hpp"

#include <spdlog/spdlog.h>
#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <queue>
#include <stdexcept>

#include "engine/gguf_reader.hpp"
#include "engine/sentencepiece_bpe.hpp"
#include "engine/utf8.hpp"

namespace inferd::engine {
namespace {

// GPT-2's reversible byte <-> character mapping: printable Latin-1 bytes stand
// for themselves, the other 68 bytes are shifted to U+0100.. so that every
// vocabulary entry is printable text (a space is "Ġ", a newline "Ċ").
struct ByteMapping {
  std::array<uint32_t, 256> to_char{};
  std::unordered_map<uint32_t, uint8_t> to_byte;
  ByteMapping() {
    uint32_t shifted = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      to_char[b] = printable ? b : shifted++;
      to_byte[to_char[b]] = static_cast<uint8_t>(b);
    }
  }
};

const ByteMapping& byte_mapping() {
  static const ByteMapping m;
  return m;
}

// What a byte-level vocabulary entry stands for: each character mapped back to
// its byte; characters outside the mapping (and malformed bytes) kept as written.
std::string bytes_of(std::string_view text) {
  const auto& to_byte = byte_mapping().to_byte;
  std::string out;
  for (size_t i = 0; i < text.size();) {
    uint32_t cp = 0;
    size_t len = utf8::decode(text, i, cp);
    if (len == 0) {
      out += text[i++];
      continue;
    }
    auto it = to_byte.find(cp);
    if (it != to_byte.end()) out += static_cast<char>(it->second);
    else out.append(text.substr(i, len));
    i += len;
  }
  return out;
}

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// Names that end a turn in the common chat formats; matched only on control tokens.
constexpr std::string_view kEndOfTurn[] = {"<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end|>",
                                           "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "<EOT>"};

constexpr size_t kCacheLimit = 1 << 16;  // entries
constexpr size_t kCacheMaxPiece = 64;     // bytes

// Canonical composition (Unicode NFC) by utf8proc, the normalizer Qwen's
// tokenizer.json names. `text` is well-formed UTF-8; ASCII is its own NFC.
std::string nfc(std::string_view text) {
  if (std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; }))
    return std::string(text);
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          static_cast<utf8proc_ssize_t>(text.size()), &out,
                                          static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) throw std::runtime_error(std::string("NFC normalization: ") + utf8proc_errmsg(n));
  std::string composed(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return composed;
}

}  // namespace

Tokenizer::Tokenizer(TokenizerSpec spec)
    : model_(spec.model),
      tokens_(std::move(spec.tokens)),
      scores_(std::move(spec.scores)),
      pre_(spec.pre),
      bos_(spec.bos),
      eos_(spec.eos),
      unk_(spec.unk),
      add_bos_(spec.add_bos),
      add_eos_(spec.add_eos),
      add_space_prefix_(spec.model == TokenizerModel::SentencePiece && spec.add_space_prefix),
      normalize_nfc_(spec.model == TokenizerModel::ByteLevelBpe && spec.normalize_nfc) {
  const bool sentencepiece = model_ == TokenizerModel::SentencePiece;
  const size_t n = tokens_.size();
  if (n == 0) throw std::invalid_argument("tokenizer: empty vocabulary");
  if (n > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    throw std::invalid_argument("tokenizer: vocabulary too large");
  if (!spec.token_types.empty() && spec.token_types.size() != n)
    throw std::invalid_argument("tokenizer: " + std::to_string(spec.token_types.size()) +
                                " token types for " + std::to_string(n) + " tokens");
  if (!scores_.empty() && scores_.size() != n)
    throw std::invalid_argument("tokenizer: " + std::to_string(scores_.size()) + " token scores for " +
                                std::to_string(n) + " tokens");
  auto check_special = [n](int32_t id, const char* what) {
    if (id < -1 || id >= static_cast<int64_t>(n))
      throw std::invalid_argument(std::string("tokenizer: ") + what + " id " + std::to_string(id) +
                                  " outside the vocabulary of " + std::to_string(n));
  };
  check_special(bos_, "bos");
  check_special(eos_, "eos");
  check_special(spec.unk, "unknown-token");
  check_special(spec.eot, "end-of-turn");
  check_special(spec.eom, "end-of-message");

  types_.resize(n, TokenType::Normal);
  decoded_.resize(n);
  ids_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const auto id = static_cast<int32_t>(i);
    if (!spec.token_types.empty()) {
      int32_t t = spec.token_types[i];
      if (t < 0 || t > static_cast<int32_t>(TokenType::Byte))
        throw std::invalid_argument("tokenizer: token " + std::to_string(i) + " has unknown type " +
                                    std::to_string(t));
      types_[i] = static_cast<TokenType>(t);
    }
    ids_.emplace(tokens_[i], id);  // a duplicate keeps the first id
    switch (types_[i]) {
      case TokenType::Normal:
      case TokenType::Undefined:
        decoded_[i] = sentencepiece ? spm::unescape_spaces(tokens_[i]) : bytes_of(tokens_[i]);
        break;
      case TokenType::Byte:
        if (auto b = spm::byte_token_value(tokens_[i])) decoded_[i] = std::string(1, static_cast<char>(*b));
        break;
      case TokenType::Unused:
        break;
      default:  // control, user-defined, unknown: their text as written
        decoded_[i] = tokens_[i];
        if (!tokens_[i].empty()) specials_.push_back(id);
        break;
    }
  }
  // Longer specials win where they overlap ("<|im_start|>" over a "<|im" token).
  std::stable_sort(specials_.begin(), specials_.end(),
                   [this](int32_t a, int32_t b) { return tokens_[a].size() > tokens_[b].size(); });

  if (sentencepiece) spm_words_separate_ = spm::words_are_separate(tokens_);

  // Byte-level: the byte's GPT-2 character. SentencePiece: its byte-fallback
  // token "<0xAB>", else a token of the byte itself (as llama.cpp looks it up).
  byte_token_.fill(-1);
  const auto& to_char = byte_mapping().to_char;
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    if (sentencepiece) {
      static constexpr char kHex[] = "0123456789ABCDEF";
      const std::string fallback{'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
      if (auto id = find(fallback)) {
        byte_token_[b] = *id;
        continue;
      }
      ch = std::string(1, static_cast<char>(b));
    } else {
      utf8::append_codepoint(ch, to_char[b]);
    }
    if (auto id = find(ch)) byte_token_[b] = *id;
  }

  merges_.reserve(spec.merges.size());
  size_t unusable = 0;
  for (size_t rank = 0; rank < spec.merges.size(); ++rank) {
    const std::string& m = spec.merges[rank];
    size_t space = m.find(' ', 1);  // from 1: a left side may itself be a space
    if (space == std::string::npos) {
      ++unusable;
      continue;
    }
    auto left = find(std::string_view(m).substr(0, space));
    auto right = find(std::string_view(m).substr(space + 1));
    auto result = find(m.substr(0, space) + m.substr(space + 1));
    if (!left || !right || !result) {
      ++unusable;
      continue;
    }
    merges_.emplace(pair_key(*left, *right), Merge{static_cast<int32_t>(rank), *result});
  }
  if (unusable > 0)
    spdlog::warn("tokenizer: {} of {} merges are malformed or name tokens outside the vocabulary; ignored",
                 unusable, spec.merges.size());

  for (int32_t id : {eos_, spec.eot, spec.eom})
    if (id >= 0) stop_ids_.push_back(id);
  for (std::string_view name : kEndOfTurn)
    if (auto id = find(name); id && types_[*id] == TokenType::Control) stop_ids_.push_back(*id);
  std::sort(stop_ids_.begin(), stop_ids_.end());
  stop_ids_.erase(std::unique(stop_ids_.begin(), stop_ids_.end()), stop_ids_.end());
}

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const GgufFile& file) {
  auto fail = [&](const std::string& msg) -> LoadError { return LoadError(file.path(), 0, msg); };
  auto model = file.get_string("tokenizer.ggml.model");
  if (!model) throw fail("no tokenizer: tokenizer.ggml.model is missing");
  TokenizerSpec spec;
  if (*model == "gpt2") spec.model = TokenizerModel::ByteLevelBpe;
  else if (*model == "llama") spec.model = TokenizerModel::SentencePiece;
  else
    throw fail("tokenizer.ggml.model = '" + *model +
               "' is not supported (supported: 'gpt2', byte-level BPE; 'llama', SentencePiece)");
  const bool sentencepiece = spec.model == TokenizerModel::SentencePiece;

  spec.tokens = file.get_string_array("tokenizer.ggml.tokens");
  if (spec.tokens.empty()) throw fail("tokenizer.ggml.tokens is missing or empty");
  for (int64_t t : file.get_int_array("tokenizer.ggml.token_type"))
    spec.token_types.push_back(static_cast<int32_t>(std::clamp<int64_t>(t, -1, 1 << 20)));
  if (sentencepiece) {
    spec.scores = file.get_float_array("tokenizer.ggml.scores");
    if (spec.scores.empty()) spdlog::warn("{}: tokenizer.ggml.scores is missing; merging left to right", file.path());
    spec.pre = "default";  // not used: SentencePiece does not pre-tokenize
    spec.add_space_prefix = file.get_bool("tokenizer.ggml.add_space_prefix").value_or(true);
  } else {
    spec.merges = file.get_string_array("tokenizer.ggml.merges");
    if (auto pre = file.get_string("tokenizer.ggml.pre")) {
      spec.pre = *pre;
    } else {
      spdlog::warn("{}: tokenizer.ggml.pre is missing; using the default GPT-2 pre-tokenizer", file.path());
      spec.pre = "default";
    }
  }
  // Llama's SentencePiece vocabularies number <unk>, <s>, </s> from 0 when the
  // file does not say (as llama.cpp assumes).
  auto id = [&](const char* key, int32_t sentencepiece_default) -> int32_t {
    auto v = file.get_int(key);
    if (!v) return sentencepiece ? sentencepiece_default : -1;
    if (*v < 0 || *v > std::numeric_limits<int32_t>::max())
      throw fail(std::string(key) + " = " + std::to_string(*v) + " is not a token id");
    return static_cast<int32_t>(*v);
  };
  spec.bos = id("tokenizer.ggml.bos_token_id", 1);
  spec.eos = id("tokenizer.ggml.eos_token_id", 2);
  spec.unk = id("tokenizer.ggml.unknown_token_id", 0);
  spec.eot = id("tokenizer.ggml.eot_token_id", -1);
  spec.eom = id("tokenizer.ggml.eom_token_id", -1);
  spec.add_bos = file.get_bool("tokenizer.ggml.add_bos_token").value_or(sentencepiece);
  spec.add_eos = file.get_bool("tokenizer.ggml.add_eos_token").value_or(false);
  // Not a GGUF key: Hugging Face directories (engine/hf_checkpoint.cpp) carry their normalizer so.
  if (auto norm = file.get_string("inferd.tokenizer.normalizer")) {
    if (*norm != "NFC" || sentencepiece)
      throw fail("inferd.tokenizer.normalizer = '" + *norm + "' is not supported (only NFC, byte-level BPE)");
    spec.normalize_nfc = true;
  }
  try {
    return std::make_unique<Tokenizer>(std::move(spec));
  } catch (const std::invalid_argument& e) {
    throw fail(e.what());
  }
}

void Tokenizer::check_id(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= tokens_.size())
    throw std::out_of_range("token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                            std::to_string(tokens_.size() - 1) + ")");
}

const std::string& Tokenizer::token_text(int32_t id) const {
  check_id(id);
  return tokens_[id];
}

TokenType Tokenizer::token_type(int32_t id) const {
  check_id(id);
  return types_[id];
}

std::optional<int32_t> Tokenizer::find(std::string_view token_text) const {
  auto it = ids_.find(token_text);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

std::string_view Tokenizer::piece(int32_t id, bool skip_special) const {
  check_id(id);
  if (skip_special && (types_[id] == TokenType::Control || types_[id] == TokenType::Unknown)) return {};
  return decoded_[id];
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string out;
  for (int32_t id : ids) out += piece(id, skip_special);
  // The space the encoder put before the text is not the text's. As llama.cpp
  // does, it is taken from the first token only: behind a BOS it stays.
  if (add_space_prefix_ && !ids.empty() && piece(ids.front(), skip_special).starts_with(' ')) out.erase(0, 1);
  return out;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  return encode(text, add_special, parse_special, {});
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special,
                                       std::span<const TextRange> plain) const {
  return encode(text, add_special, true, plain);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special,
                                       std::span<const TextRange> plain) const {
  // Whether a control token found at [at, at + n) of the text lies in plain text.
  auto in_plain = [&](size_t at, size_t n) {
    for (const TextRange& r : plain)
      if (at < r.end && r.begin < at + n) return true;
    return false;
  };
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_special && add_bos_ && bos_ >= 0) out.push_back(bos_);

  // Split the text around special tokens, longest token first: each one cuts
  // the plain fragments left by the ones before it.
  struct Fragment {
    std::string_view text;
    int32_t id;  // -1: plain text
  };
  std::vector<Fragment> fragments;
  if (!text.empty()) fragments.push_back({text, -1});
  std::vector<Fragment> next;
  for (int32_t sid : specials_) {
    TokenType t = types_[sid];
    if (!parse_special && t != TokenType::UserDefined) continue;
    const std::string& s = tokens_[sid];
    if (text.find(s) == std::string_view::npos) continue;
    next.clear();
    for (const Fragment& f : fragments) {
      if (f.id >= 0) {
        next.push_back(f);
        continue;
      }
      size_t start = 0;  // of the text not yet cut off
      for (size_t from = 0, at; (at = f.text.find(s, from)) != std::string_view::npos;) {
        const size_t offset = static_cast<size_t>(f.text.data() - text.data()) + at;
        if (t != TokenType::UserDefined && in_plain(offset, s.size())) {
          from = at + 1;  // stays text
          continue;
        }
        if (at > start) next.push_back({f.text.substr(start, at - start), -1});
        next.push_back({{}, sid});
        start = from = at + s.size();
      }
      if (start < f.text.size()) next.push_back({f.text.substr(start), -1});
    }
    fragments.swap(next);
  }

  bool after_special = true;  // the start of the text counts as after one
  for (const Fragment& f : fragments) {
    if (f.id >= 0) out.push_back(f.id);
    else encode_text(f.text, after_special, out);
    after_special = f.id >= 0;
  }
  if (add_special && add_eos_ && eos_ >= 0) out.push_back(eos_);
  return out;
}

void Tokenizer::encode_text(std::string_view text, bool after_special, std::vector<int32_t>& out) const {
  if (model_ == TokenizerModel::SentencePiece) {
    // The space prefix makes a text's first word (and the first after a special
    // token) look like any other word, which starts after a space.
    const std::string escaped = spm::escape_spaces(text, add_space_prefix_ && after_special);
    // Word by word where merges cannot cross words: short queues, and cached.
    if (spm_words_separate_)
      for (std::string_view word : spm::words(escaped)) encode_piece(word, out);
    else
      encode_piece(escaped, out);
    return;
  }
  // Bytes that do not begin a well-formed character are read as U+FFFD, one
  // each, the way the reference tokenizer (llama.cpp) reads them.
  std::string repaired;
  if (!utf8::is_valid(text)) {
    repaired.reserve(text.size() + 8);
    for (size_t i = 0; i < text.size();) {
      utf8::Sequence q = utf8::classify(text, i);
      if (q.status == utf8::Status::Complete) {
        repaired.append(text.substr(i, q.length));
        i += q.length;
      } else {
        repaired.append(utf8::kReplacement);
        i += 1;
      }
    }
    text = repaired;
  }
  std::string composed;
  if (normalize_nfc_) text = composed = nfc(text);
  for (std::string_view piece : pre_.split(text)) encode_piece(piece, out);
}

void Tokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  const bool cacheable = piece.size() <= kCacheMaxPiece;  // long runs are rare; keep the cache small
  if (cacheable) {
    std::lock_guard lock(cache_mutex_);
    if (auto it = cache_.find(piece); it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids = model_ == TokenizerModel::SentencePiece ? spm_merge(piece) : bpe(piece);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::lock_guard lock(cache_mutex_);
    if (cache_.size() >= kCacheLimit) cache_.clear();  // crude, but bounded and rarely hit
    cache_.emplace(piece, std::move(ids));
  }
}

std::vector<int32_t> Tokenizer::spm_merge(std::string_view escaped) const {
  std::vector<int32_t> ids;
  spm::encode(escaped, {ids_, scores_, byte_token_, unk_}, ids);
  return ids;
}

std::vector<int32_t> Tokenizer::bpe(std::string_view piece) const {
  if (pre_.ignore_merges()) {
    std::string as_chars;
    for (unsigned char b : piece) utf8::append_codepoint(as_chars, byte_mapping().to_char[b]);
    if (auto id = find(as_chars)) return {*id};
  }

  // One symbol per byte in a linked list; merging a pair folds the right symbol
  // into the left one. Candidates wait in a queue ordered by (rank, position)
  // and are checked against the current list when they come out, so stale ones
  // (a side already merged elsewhere) are simply dropped.
  const auto n = static_cast<int32_t>(piece.size());
  struct Symbol {
    int32_t id, prev, next;
  };
  std::vector<Symbol> sym(n);
  for (int32_t i = 0; i < n; ++i)
    sym[i] = {byte_token_[static_cast<unsigned char>(piece[i])], i - 1, i + 1 < n ? i + 1 : -1};

  struct Candidate {
    int32_t rank, left, left_id, right_id, result;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto consider = [&](int32_t left) {
    if (left < 0) return;
    int32_t right = sym[left].next;
    if (right < 0 || sym[left].id < 0 || sym[right].id < 0) return;
    auto it = merges_.find(pair_key(sym[left].id, sym[right].id));
    if (it != merges_.end())
      queue.push({it->second.rank, left, sym[left].id, sym[right].id, it->second.result});
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i);

  while (!queue.empty()) {
    Candidate c = queue.top();
    queue.pop();
    Symbol& l = sym[c.left];
    if (l.id != c.left_id || l.next < 0 || sym[l.next].id != c.right_id) continue;
    Symbol& r = sym[l.next];
    l.id = c.result;
    r.id = -2;  // folded away; never part of a valid candidate again
    l.next = r.next;
    if (l.next >= 0) sym[l.next].prev = c.left;
    consider(l.prev);
    consider(c.left);
  }

  std::vector<int32_t> ids;
  for (int32_t i = n > 0 ? 0 : -1; i >= 0; i = sym[i].next) {
    // A byte the vocabulary cannot spell (SmolLM's has no token for some
    // control characters) is dropped, as the reference tokenizer drops it.
    if (sym[i].id >= 0) ids.push_back(sym[i].id);
  }
  return ids;
}

}  // namespace inferd::engine
