// Tokenizer, pre-tokenizer and incremental detokenizer. The default model's
// tokenizer (byte-level BPE) is compared with llama.cpp's ids for tricky texts
// (tests/golden/tokenize.json, made by tools/make_tokenizer_golden.py), and so
// is a small SentencePiece vocabulary's (tests/golden/spm-tiny.gguf and
// tokenize_spm.json, made by tools/make_spm_fixture.py).
#include <doctest/doctest.h>

#include <boost/json.hpp>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "engine/gguf_reader.hpp"
#include "engine/output/incremental_detokenizer.hpp"
#include "engine/tokenizer.hpp"
#include "engine/utf8.hpp"
#include "tests/unit/gguf_writer.hpp"
#include "tests/unit/test_paths.hpp"

using namespace inferd::engine;

namespace {

// Loaded once: every case below reads the same vocabulary.
const Tokenizer& smollm() {
  static const std::unique_ptr<Tokenizer> tok = [] {
    const std::string path = test_paths::default_model();
    if (!std::filesystem::exists(path)) FAIL("default model missing at " << path << " (run tools/bootstrap.sh)");
    return Tokenizer::from_gguf(*GgufFile::open(path));
  }();
  return *tok;
}

// The SentencePiece fixture: a tiny Llama model with a vocabulary of 2000 pieces.
const Tokenizer& spm_tiny() {
  static const std::unique_ptr<Tokenizer> tok =
      Tokenizer::from_gguf(*GgufFile::open(test_paths::source_dir() + "/tests/golden/spm-tiny.gguf"));
  return *tok;
}

struct GoldenCase {
  std::string input;
  std::vector<int32_t> ids, ids_special;
  bool is_text;
};

std::vector<int32_t> to_ids(const boost::json::value& v) {
  std::vector<int32_t> ids;
  for (const auto& x : v.as_array()) ids.push_back(static_cast<int32_t>(x.as_int64()));
  return ids;
}

std::vector<GoldenCase> golden_cases(const std::string& file) {
  std::ifstream in(test_paths::source_dir() + "/tests/golden/" + file);
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  const boost::json::value doc = boost::json::parse(ss.str());
  std::vector<GoldenCase> cases;
  for (const auto& c : doc.at("cases").as_array()) {
    const auto& o = c.as_object();
    GoldenCase g;
    g.is_text = o.contains("text");
    if (g.is_text) {
      g.input = std::string(o.at("text").as_string());
    } else {
      const std::string hex(o.at("hex").as_string());
      for (size_t i = 0; i + 1 < hex.size(); i += 2) g.input += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
    }
    g.ids = to_ids(o.at("ids"));
    g.ids_special = to_ids(o.at("ids_special"));
    cases.push_back(std::move(g));
  }
  return cases;
}

std::string ids_str(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += std::to_string(id) + " ";
  return s;
}

// The id whose bytes are exactly `bytes` (single bytes that the text encoder
// would never produce on their own, like a lone 0xF0).
int32_t id_of_bytes(const Tokenizer& tok, std::string_view bytes) {
  for (size_t id = 0; id < tok.vocab_size(); ++id)
    if (tok.token_type(static_cast<int32_t>(id)) == TokenType::Normal && tok.piece(static_cast<int32_t>(id), false) == bytes)
      return static_cast<int32_t>(id);
  FAIL("no token for the bytes");
  return -1;
}

// A tiny vocabulary: every byte as its GPT-2 character, plus the given tokens.
TokenizerSpec byte_spec(std::vector<std::string> extra, std::vector<std::string> merges) {
  TokenizerSpec spec;
  uint32_t shifted = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    std::string ch;
    utf8::append_codepoint(ch, printable ? b : shifted++);
    spec.tokens.push_back(ch);
  }
  for (auto& t : extra) spec.tokens.push_back(std::move(t));
  spec.merges = std::move(merges);
  return spec;
}

struct Encoded {
  std::vector<int32_t> plain, special;  // special tokens in the text taken literally / parsed
};

// Both encodings of one golden case, checked against the reference's ids.
Encoded check_case(const Tokenizer& tok, const GoldenCase& c) {
  Encoded e{tok.encode(c.input, false, false), tok.encode(c.input, false, true)};
  CHECK_MESSAGE(e.plain == c.ids, "got " << ids_str(e.plain) << "\nwant " << ids_str(c.ids));
  CHECK_MESSAGE(e.special == c.ids_special, "got " << ids_str(e.special) << "\nwant " << ids_str(c.ids_special));
  return e;
}

}  // namespace

TEST_CASE("tokenizer matches llama.cpp on the golden texts") {
  const Tokenizer& tok = smollm();
  const auto cases = golden_cases("tokenize.json");
  REQUIRE(cases.size() >= 25);
  size_t nonempty = 0;
  for (const GoldenCase& c : cases) {
    CAPTURE(c.input);
    nonempty += !c.ids.empty();
    const auto [plain, special] = check_case(tok, c);
    if (c.is_text) {  // well-formed text the vocabulary can spell comes back unchanged
      CHECK(tok.decode(plain, false) == c.input);
      CHECK(tok.decode(special, false) == c.input);
    }
  }
  CHECK(nonempty >= 25);
}

TEST_CASE("tokenizer metadata of the default model") {
  const Tokenizer& tok = smollm();
  CHECK(tok.vocab_size() == 49152);
  CHECK(tok.bos() == 1);
  CHECK(tok.eos() == 2);
  CHECK_FALSE(tok.add_bos());
  CHECK(tok.pre_tokenizer().name() == "smollm");
  CHECK(tok.stop_ids() == std::vector<int32_t>{0, 2});  // <|endoftext|>, <|im_end|>
  CHECK(tok.find("<|im_start|>") == 1);
  CHECK(tok.find("Ġworld") == 905);
  CHECK_FALSE(tok.find("no such token").has_value());
  CHECK(tok.token_text(905) == "Ġworld");
  CHECK(tok.token_type(1) == TokenType::Control);
  CHECK(tok.token_type(905) == TokenType::Normal);
  CHECK_THROWS_AS((void)tok.token_text(-1), std::out_of_range);
  CHECK_THROWS_AS((void)tok.token_text(49152), std::out_of_range);
}

TEST_CASE("special tokens: parsed only when asked, hidden only when skipped") {
  const Tokenizer& tok = smollm();
  const auto parsed = tok.encode("<|im_start|>user\nHi<|im_end|>", false, true);
  REQUIRE(parsed.size() >= 3);
  CHECK(parsed.front() == 1);
  CHECK(parsed.back() == 2);
  const auto literal = tok.encode("<|im_start|>user\nHi<|im_end|>", false, false);
  for (int32_t id : literal) CHECK(tok.token_type(id) == TokenType::Normal);

  CHECK(tok.decode(parsed, true) == "user\nHi");
  CHECK(tok.decode(parsed, false) == "<|im_start|>user\nHi<|im_end|>");
  // add_special follows the model: SmolLM2 asks for no BOS.
  CHECK(tok.encode("Hi", true, true) == tok.encode("Hi", false, true));
  const std::vector<int32_t> bad{19556, 50000};
  CHECK_THROWS_AS(tok.decode(bad, false), std::out_of_range);
}

TEST_CASE("encoding is the same from concurrent threads") {
  const Tokenizer& tok = smollm();
  const std::string text = "Concurrent 12345 tokenization \xF0\x9F\xA6\x99 with a shared cache. ";
  const auto want = tok.encode(text, false, true);
  std::vector<std::vector<int32_t>> got(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) got[t] = tok.encode(text + std::to_string(i % 3), false, true);
    });
  for (auto& th : threads) th.join();
  for (const auto& g : got) CHECK(g == tok.encode(text + "1", false, true));
  CHECK(tok.encode(text, false, true) == want);
}

TEST_CASE("BPE applies merges by rank, not left to right") {
  // "b c" outranks "a b": "abc" -> a + bc, even though "ab c" -> "abc" exists.
  Tokenizer by_rank(byte_spec({"ab", "bc", "abc"}, {"b c", "a b", "ab c"}));
  const auto ids = by_rank.encode("abc", false, false);
  REQUIRE(ids.size() == 2);
  CHECK(by_rank.token_text(ids[0]) == "a");
  CHECK(by_rank.token_text(ids[1]) == "bc");

  Tokenizer left_first(byte_spec({"ab", "bc", "abc"}, {"a b", "b c", "ab c"}));
  const auto one = left_first.encode("abc", false, false);
  REQUIRE(one.size() == 1);
  CHECK(left_first.token_text(one[0]) == "abc");

  // Equal pairs merge leftmost first: "aaa" -> "aa" + "a".
  Tokenizer pairs(byte_spec({"aa"}, {"a a"}));
  const auto aaa = pairs.encode("aaa", false, false);
  REQUIRE(aaa.size() == 2);
  CHECK(pairs.token_text(aaa[0]) == "aa");
  CHECK(pairs.token_text(aaa[1]) == "a");
}

TEST_CASE("BOS and EOS are added where the spec asks") {
  TokenizerSpec spec = byte_spec({"<s>", "</s>"}, {});
  spec.token_types.assign(spec.tokens.size(), static_cast<int32_t>(TokenType::Normal));
  spec.token_types[256] = spec.token_types[257] = static_cast<int32_t>(TokenType::Control);
  spec.bos = 256;
  spec.eos = 257;
  spec.add_bos = true;
  Tokenizer tok(std::move(spec));
  const auto ids = tok.encode("x", true, false);
  CHECK(ids == std::vector<int32_t>{256, *tok.find("x")});
  CHECK(tok.encode("x", false, false) == std::vector<int32_t>{*tok.find("x")});
  CHECK(tok.stop_ids() == std::vector<int32_t>{257});
}

TEST_CASE("user-defined tokens always match, control tokens only when parsing specials") {
  TokenizerSpec spec = byte_spec({"<ctl>", "<usr>"}, {});
  spec.token_types.assign(spec.tokens.size(), static_cast<int32_t>(TokenType::Normal));
  spec.token_types[256] = static_cast<int32_t>(TokenType::Control);
  spec.token_types[257] = static_cast<int32_t>(TokenType::UserDefined);
  Tokenizer tok(std::move(spec));
  CHECK(tok.encode("<usr>", false, false) == std::vector<int32_t>{257});
  CHECK(tok.encode("<ctl>", false, false).size() == 5);
  CHECK(tok.encode("<ctl>", false, true) == std::vector<int32_t>{256});
  const std::vector<int32_t> both{256, 257};
  CHECK(tok.decode(both, true) == "<usr>");
  CHECK(tok.decode(both, false) == "<ctl><usr>");
}

TEST_CASE("control tokens inside plain ranges stay text; user-defined ones still match") {
  TokenizerSpec spec = byte_spec({"<ctl>", "<usr>"}, {});
  spec.token_types.assign(spec.tokens.size(), static_cast<int32_t>(TokenType::Normal));
  spec.token_types[256] = static_cast<int32_t>(TokenType::Control);
  spec.token_types[257] = static_cast<int32_t>(TokenType::UserDefined);
  Tokenizer tok(std::move(spec));
  const std::string_view text = "<ctl>a<ctl><usr><ctl>";
  const std::vector<TextRange> none;
  CHECK(tok.encode(text, false, none) == tok.encode(text, false, true));
  const std::vector<TextRange> middle{{5, 16}};  // "a<ctl><usr>"
  const auto ids = tok.encode(text, false, middle);
  CHECK(std::count(ids.begin(), ids.end(), 256) == 2);  // the first and the last
  CHECK(std::count(ids.begin(), ids.end(), 257) == 1);
  CHECK(ids.front() == 256);
  CHECK(ids.back() == 256);
  CHECK(tok.decode(ids, false) == text);
  // A control token only partly inside a plain range is text too.
  const std::vector<TextRange> edge{{0, 1}};
  CHECK(tok.encode("<ctl>", false, edge).size() == 5);
}

TEST_CASE("inconsistent tokenizer specs are rejected with a clear error") {
  TokenizerSpec types = byte_spec({}, {});
  types.token_types = {1, 1, 1};
  CHECK_THROWS_WITH_AS(Tokenizer(std::move(types)), doctest::Contains("3 token types for 256 tokens"),
                       std::invalid_argument);
  TokenizerSpec pre = byte_spec({}, {});
  pre.pre = "klingon";
  CHECK_THROWS_WITH_AS(Tokenizer(std::move(pre)), doctest::Contains("'klingon'"), std::invalid_argument);
  TokenizerSpec eos = byte_spec({}, {});
  eos.eos = 300;
  CHECK_THROWS_WITH_AS(Tokenizer(std::move(eos)), doctest::Contains("eos id 300"), std::invalid_argument);
  CHECK_THROWS_AS(Tokenizer(TokenizerSpec{}), std::invalid_argument);
}

namespace {

// A hand-made SentencePiece vocabulary: <unk>, then the pieces with their scores.
TokenizerSpec spm_spec(std::vector<std::pair<std::string, float>> pieces, bool space_prefix = false) {
  TokenizerSpec spec;
  spec.model = TokenizerModel::SentencePiece;
  spec.add_space_prefix = space_prefix;
  spec.tokens = {"<unk>"};
  spec.token_types = {static_cast<int32_t>(TokenType::Unknown)};
  spec.scores = {0};
  spec.unk = 0;
  for (auto& [text, score] : pieces) {
    const bool byte = text.starts_with("<0x");
    spec.tokens.push_back(std::move(text));
    spec.token_types.push_back(static_cast<int32_t>(byte ? TokenType::Byte : TokenType::Normal));
    spec.scores.push_back(score);
  }
  return spec;
}

std::vector<std::string> texts_of(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  std::vector<std::string> out;
  for (int32_t id : ids) out.push_back(tok.token_text(id));
  return out;
}

}  // namespace

TEST_CASE("SentencePiece tokenizer matches llama.cpp on the golden texts") {
  const Tokenizer& tok = spm_tiny();
  const auto cases = golden_cases("tokenize_spm.json");
  REQUIRE(cases.size() >= 30);
  size_t round_trips = 0;
  for (const GoldenCase& c : cases) {
    CAPTURE(c.input);
    const auto plain = check_case(tok, c).plain;
    // Byte fallback spells any character, so well-formed text comes back
    // whole, unless it holds a "▁" of its own (which decodes as a space).
    if (c.is_text && c.input.find("\xE2\x96\x81") == std::string::npos) {
      CHECK(tok.decode(plain, false) == c.input);
      ++round_trips;
    }
  }
  CHECK(round_trips >= 30);
}

TEST_CASE("SentencePiece metadata, BOS and the space prefix of the fixture") {
  const Tokenizer& tok = spm_tiny();
  CHECK(tok.model() == TokenizerModel::SentencePiece);
  CHECK(tok.vocab_size() == 2000);
  CHECK(tok.bos() == 1);
  CHECK(tok.eos() == 2);
  CHECK(tok.add_bos());
  CHECK(tok.token_type(0) == TokenType::Unknown);
  CHECK(tok.token_type(1) == TokenType::Control);
  CHECK(tok.find("<|im_end|>") == 4);
  CHECK(tok.stop_ids() == std::vector<int32_t>{2, 4});  // </s>, <|im_end|>
  const auto newline = tok.find("<0x0A>");
  REQUIRE(newline.has_value());
  CHECK(tok.token_type(*newline) == TokenType::Byte);
  CHECK(tok.piece(*newline, false) == "\n");
  const auto the = tok.find("\xE2\x96\x81the");  // "▁the"
  REQUIRE(the.has_value());
  CHECK(tok.piece(*the, false) == " the");

  // BOS where the model asks for it; a space before the text and after each special token.
  const auto hi = tok.encode("Hi", false, true);
  const auto with_bos = tok.encode("Hi", true, true);
  REQUIRE(with_bos.size() == hi.size() + 1);
  CHECK(with_bos.front() == 1);
  CHECK(std::equal(hi.begin(), hi.end(), with_bos.begin() + 1));
  CHECK(tok.decode(hi, false) == "Hi");
  // As llama.cpp detokenizes: the first token keeps its space behind a BOS.
  CHECK(tok.decode(with_bos, true) == " Hi");
  std::vector<int32_t> want = tok.encode("a", false, false);
  want.push_back(4);
  const auto b = tok.encode("b", false, false);
  want.insert(want.end(), b.begin(), b.end());
  CHECK(tok.encode("a<|im_end|>b", false, true) == want);
  CHECK(tok.decode(want, false) == "a<|im_end|> b");
  CHECK(tok.decode(want, true) == "a b");
  // A lead byte takes the next three bytes into its character whatever they
  // are: here the "▁" of the space, which then comes back as bytes (as in llama.cpp).
  CHECK(tok.decode(tok.encode("\xF0 a", false, false), false) == "\xF0\xE2\x96\x81" "a");
}

TEST_CASE("SentencePiece merges by score, leftmost first among equals") {
  // "bc" outscores "ab": "abc" -> a + bc; the other way round: ab + c.
  Tokenizer bc(spm_spec({{"a", -1}, {"b", -1}, {"c", -1}, {"ab", -3}, {"bc", -2}}));
  CHECK(texts_of(bc, bc.encode("abc", false, false)) == std::vector<std::string>{"a", "bc"});
  Tokenizer ab(spm_spec({{"a", -1}, {"b", -1}, {"c", -1}, {"ab", -2}, {"bc", -3}}));
  CHECK(texts_of(ab, ab.encode("abc", false, false)) == std::vector<std::string>{"ab", "c"});
  // Merged pieces merge again: a + bc -> abc.
  Tokenizer abc(spm_spec({{"a", -1}, {"b", -1}, {"c", -1}, {"ab", -3}, {"bc", -2}, {"abc", -4}}));
  CHECK(texts_of(abc, abc.encode("abc", false, false)) == std::vector<std::string>{"abc"});
  Tokenizer aa(spm_spec({{"a", -1}, {"aa", -2}}));
  CHECK(texts_of(aa, aa.encode("aaa", false, false)) == std::vector<std::string>{"aa", "a"});
  // Spaces are "▁"; the space prefix starts the text with one.
  Tokenizer words(spm_spec({{"\xE2\x96\x81", -1}, {"a", -1}, {"\xE2\x96\x81" "a", -2}}, true));
  CHECK(texts_of(words, words.encode("a a", false, false)) ==
        std::vector<std::string>{"\xE2\x96\x81" "a", "\xE2\x96\x81" "a"});
  CHECK(words.decode(words.encode("a a", false, false), false) == "a a");
  CHECK(words.decode(words.encode(" a", false, false), false) == " a");
  // A piece that joins a word to the next one's "▁": the text is merged whole,
  // not word by word.
  Tokenizer across(spm_spec({{"\xE2\x96\x81", -1}, {"a", -1}, {"b", -1}, {"a\xE2\x96\x81", -2}, {"a\xE2\x96\x81" "b", -3}}));
  CHECK(texts_of(across, across.encode("a b", false, false)) == std::vector<std::string>{"a\xE2\x96\x81" "b"});
}

TEST_CASE("SentencePiece spells what it has no piece for with byte tokens, else <unk>") {
  Tokenizer tok(spm_spec({{"a", -1}, {"<0xC3>", 0}, {"<0xA9>", 0}, {"<0xFF>", 0}}));
  // "é" is C3 A9: no piece, so its bytes; "b" has no byte token either: <unk>.
  CHECK(texts_of(tok, tok.encode("a\xC3\xA9" "b", false, false)) ==
        std::vector<std::string>{"a", "<0xC3>", "<0xA9>", "<unk>"});
  CHECK(tok.decode(tok.encode("a\xC3\xA9", false, false), false) == "a\xC3\xA9");
  // Malformed UTF-8 passes through the byte tokens unchanged.
  CHECK(tok.decode(tok.encode("\xFF\xC3", false, false), false) == "\xFF\xC3");
  TokenizerSpec no_unk = spm_spec({{"a", -1}});
  no_unk.unk = -1;
  Tokenizer dropped(std::move(no_unk));
  CHECK(texts_of(dropped, dropped.encode("bab", false, false)) == std::vector<std::string>{"a"});
}

TEST_CASE("tokenizer models other than gpt2 and llama are refused naming the key") {
  GgufWriter w;
  w.header(0, 1).kv_str("tokenizer.ggml.model", "bert");
  const auto file = GgufFile::open_memory(w.b, "bert.gguf");
  CHECK_THROWS_WITH_AS(Tokenizer::from_gguf(*file), doctest::Contains("tokenizer.ggml.model = 'bert' is not supported"),
                       LoadError);
  TokenizerSpec scores = spm_spec({{"a", -1}});
  scores.scores.pop_back();
  CHECK_THROWS_WITH_AS(Tokenizer(std::move(scores)), doctest::Contains("1 token scores for 2 tokens"),
                       std::invalid_argument);
}

TEST_CASE("pre-tokenizer families split as their models expect") {
  auto split = [](std::string_view family, std::string_view text) {
    std::vector<std::string> out;
    for (auto p : PreTokenizer(family).split(text)) out.emplace_back(p);
    return out;
  };
  using V = std::vector<std::string>;
  CHECK(split("gpt2", "it's  12345 ok!") == V{"it", "'s", " ", " 12345", " ok", "!"});
  CHECK(split("smollm", "it's  12345 ok!") == V{"it", "'s", "  ", "1", "2", "3", "4", "5", " ok", "!"});
  CHECK(split("llama3", "IT'S 12345\n\nx") == V{"IT", "'S", " ", "123", "45", "\n\n", "x"});
  CHECK(split("qwen2", "a 123") == V{"a", " ", "1", "2", "3"});
  CHECK(split("gpt2", "").empty());
  // Bytes that are not UTF-8 still come out, covered exactly.
  const std::string junk = "ab\xFF\xC3 cd";
  std::string joined;
  for (auto p : PreTokenizer("smollm").split(junk)) joined += p;
  CHECK(joined == junk);
}

TEST_CASE("malformed UTF-8 never breaks encoding") {
  const Tokenizer& tok = smollm();
  std::string all_bytes;
  for (int b = 0; b < 256; ++b) all_bytes += static_cast<char>(b);
  const auto ids = tok.encode(all_bytes + all_bytes, false, true);
  CHECK_FALSE(ids.empty());
  CHECK(utf8::is_valid(tok.decode(ids, false)));
}

TEST_CASE("incremental detokenizer holds back split characters") {
  const Tokenizer& tok = smollm();
  const std::string text =
      "I \xE2\x9D\xA4\xEF\xB8\x8F \xF0\x9F\xA6\x99s! \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9 "
      "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xF0\x9F\x98\x80\xF0\x9F\x98\x83";
  const auto ids = tok.encode(text, false, false);
  IncrementalDetokenizer detok(tok);
  std::string streamed;
  size_t held_back = 0;
  for (int32_t id : ids) {
    const std::string chunk = detok.push(id);
    CHECK_MESSAGE(utf8::is_valid(chunk), "token " << id << " emitted a broken chunk");
    held_back += chunk.empty();
    streamed += chunk;
  }
  streamed += detok.finish();
  CHECK(held_back > 0);  // the emoji really are split across tokens here
  CHECK(streamed == tok.decode(ids, true));
  CHECK(streamed == text);
}

TEST_CASE("incremental detokenizer replaces bytes that cannot form a character") {
  const Tokenizer& tok = smollm();
  const int32_t f0 = id_of_bytes(tok, "\xF0"), x9f = id_of_bytes(tok, "\x9F"), x98 = id_of_bytes(tok, "\x98"),
                x80 = id_of_bytes(tok, "\x80"), a = *tok.find("a");
  IncrementalDetokenizer detok(tok);
  // One byte at a time: nothing until the emoji is whole.
  CHECK(detok.push(f0).empty());
  CHECK(detok.push(x9f).empty());
  CHECK(detok.push(x98).empty());
  CHECK(detok.held_bytes() == 3);
  CHECK(detok.push(x80) == "\xF0\x9F\x98\x80");
  // A stray continuation byte can never complete: replaced at once.
  CHECK(detok.push(x80) == "\xEF\xBF\xBD");
  // A started character interrupted by ASCII is broken: U+FFFD, then the ASCII.
  CHECK(detok.push(f0).empty());
  CHECK(detok.push(a) == "\xEF\xBF\xBD" "a");
  // An unfinished character at the end is flushed as one U+FFFD.
  CHECK(detok.push(f0).empty());
  CHECK(detok.push(x9f).empty());
  CHECK(detok.finish() == "\xEF\xBF\xBD");
  CHECK(detok.held_bytes() == 0);
  CHECK(detok.finish().empty());
}

TEST_CASE("incremental detokenizer skips or prints special tokens") {
  const Tokenizer& tok = smollm();
  const auto ids = tok.encode("<|im_start|>assistant\nHi \xF0\x9F\x98\x80<|im_end|>", false, true);
  auto stream = [&](bool skip) {
    IncrementalDetokenizer d(tok, skip);
    std::string s;
    for (int32_t id : ids) s += d.push(id);
    return s + d.finish();
  };
  CHECK(stream(true) == "assistant\nHi \xF0\x9F\x98\x80");
  CHECK(stream(false) == "<|im_start|>assistant\nHi \xF0\x9F\x98\x80<|im_end|>");
  IncrementalDetokenizer d(tok);
  CHECK_THROWS_AS(d.push(-5), std::out_of_range);
}
