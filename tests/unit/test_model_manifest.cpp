// Checkpoint manifests (engine/model_manifest.hpp, daemon/model_integrity.hpp):
// sha256sum's formats parse and malformed lines are named by file and line;
// SHA-256 matches the standard's test vectors; a copy of the tiny checkpoint
// verifies against a manifest of its own digests, and a flipped byte, a missing
// file and a weight file the manifest does not name are each reported with the
// file named (a mismatch with both digests).
#include <doctest/doctest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "daemon/config.hpp"
#include "daemon/model_integrity.hpp"
#include "engine/gguf_reader.hpp"
#include "engine/model_manifest.hpp"
#include "tests/unit/test_paths.hpp"

using namespace inferd;
namespace fs = std::filesystem;

namespace {

constexpr const char* kEmpty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
constexpr const char* kAbc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

void write_text(const fs::path& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

std::string parse_error(const std::string& text) {
  try {
    engine::parse_manifest(text, "SUMS");
  } catch (const engine::ManifestError& e) {
    return e.what();
  }
  return "";
}

engine::VerifyOptions threads(int n) {
  engine::VerifyOptions o;
  o.threads = n;
  return o;
}

// A scratch copy of tests/golden/hf-tiny, removed at the end.
struct Checkpoint {
  fs::path dir;
  explicit Checkpoint(const std::string& tag) {
    dir = fs::temp_directory_path() / ("inferd-manifest-" + tag + "-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    for (const auto& e : fs::directory_iterator(test_paths::source_dir() + "/tests/golden/hf-tiny"))
      fs::copy_file(e.path(), dir / e.path().filename());
  }
  ~Checkpoint() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string path(const std::string& name = "") const { return (dir / name).string(); }
  // SHA256SUMS over every file here, as `sha256sum *` in the directory writes it.
  std::string write_sums() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().filename() != "SHA256SUMS") names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    std::string text;
    for (const auto& n : names) text += engine::sha256_file(path(n)) + "  " + n + "\n";
    write_text(dir / "SHA256SUMS", text);
    return text;
  }
};

void flip_byte(const std::string& path, uint64_t at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(at));
  char c = 0;
  f.get(c);
  f.seekp(static_cast<std::streamoff>(at));
  f.put(static_cast<char>(c ^ 0x01));
}

}  // namespace

TEST_SUITE("model_manifest") {
  TEST_CASE("manifest: SHA-256 of the standard's test vectors, streamed") {
    const fs::path dir = fs::temp_directory_path() / ("inferd-sha-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    write_text(dir / "empty", "");
    write_text(dir / "abc", "abc");
    CHECK(engine::sha256_file((dir / "empty").string()) == kEmpty);
    CHECK(engine::sha256_file((dir / "abc").string()) == kAbc);
    // Larger than one read (4 MiB), so the digest spans pieces: 10 MiB of 'a'.
    write_text(dir / "big", std::string(10 << 20, 'a'));
    uint64_t seen = 0;
    const std::string big = engine::sha256_file((dir / "big").string(), [&](uint64_t n) { seen += n; });
    CHECK(seen == (10u << 20));
    CHECK(big == "b5eec3f68ef64d15e82dad91ff908582c5f081e61a62e22427af9bec2cd35f8d");  // as sha256sum says
    CHECK_THROWS_WITH_AS(engine::sha256_file((dir / "none").string()), doctest::Contains("none: No such file"),
                         std::runtime_error);
    CHECK_THROWS_WITH_AS(engine::sha256_file((dir / "big").string(), {}, [] { return true; }),
                         doctest::Contains("verification stopped"), std::runtime_error);
    fs::remove_all(dir);
  }

  TEST_CASE("manifest: sha256sum's text, binary, escaped and BSD forms") {
    const std::string text = std::string(kAbc) + "  model.safetensors\n" +  // text mode
                             "\n" +                                        // blank lines are skipped
                             std::string(kEmpty) + " *config.json\r\n" +   // binary mode, CRLF
                             "\\" + kAbc + "  back\\\\slash\\nname\n" +    // escaped name
                             "SHA256 (shard 2.safetensors) = " + "BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD";
    const auto e = engine::parse_manifest(text, "SUMS");
    REQUIRE(e.size() == 4);
    CHECK(e[0].name == "model.safetensors");
    CHECK(e[0].digest == kAbc);
    CHECK(e[0].line == 1);
    CHECK(e[1].name == "config.json");
    CHECK(e[1].line == 3);
    CHECK(e[2].name == "back\\slash\nname");
    CHECK(e[3].name == "shard 2.safetensors");
    CHECK(e[3].digest == kAbc);  // lower-cased
  }

  TEST_CASE("manifest: malformed lines are named by file and line") {
    const std::string ok = std::string(kAbc) + "  a\n";
    CHECK(parse_error(ok + "abc123  b\n") ==
          "SUMS: line 2: not '<64 hex digits>  NAME' as sha256sum writes (the digest is 6 characters, need 64)");
    CHECK(parse_error(ok + std::string(63, 'a') + "g  b\n") ==
          "SUMS: line 2: not '<64 hex digits>  NAME' as sha256sum writes (the digest is not hex)");
    CHECK(parse_error(ok + kAbc + "\n") == "SUMS: line 2: no file name after the digest (need two spaces, or ' *', between them)");
    CHECK(parse_error(ok + kAbc + " b\n") == "SUMS: line 2: no file name after the digest (need two spaces, or ' *', between them)");
    CHECK(parse_error(ok + kAbc + "  \n") == "SUMS: line 2: no file name after the digest");
    CHECK(parse_error(ok + "\n" + kEmpty + "  a\n") == "SUMS: line 3: 'a' is listed again (first on line 1)");
    CHECK(parse_error(ok + "MD5 (b) = 900150983cd24fb0d6963f7d28e17f72\n") ==
          "SUMS: line 2: a MD5 line: only SHA-256 digests are read");
    CHECK(parse_error(ok + "SHA256 (b) = 900150983cd24fb0d6963f7d28e17f72\n") ==
          "SUMS: line 2: the digest is not 64 hex digits (is this a SHA-256 manifest?)");
    CHECK(parse_error(ok + "\\" + kAbc + "  b\\x\n") == "SUMS: line 2: a backslash in the name escapes neither '\\' nor 'n'");
    CHECK(parse_error("\n\n") == "SUMS: names no file");
  }

  TEST_CASE("manifest: found in a checkpoint directory, beside a GGUF file, or given") {
    Checkpoint c("find");
    CHECK(engine::find_manifest(c.path(), "") == "");
    c.write_sums();
    CHECK(engine::find_manifest(c.path(), "") == c.path("SHA256SUMS"));
    CHECK(engine::find_manifest(c.path() + "/", "") == c.path("SHA256SUMS"));
    CHECK(engine::find_manifest(c.path(), "/elsewhere/SUMS") == "/elsewhere/SUMS");
    const std::string gguf = c.path("m.gguf");
    write_text(gguf, "GGUF");
    CHECK(engine::find_manifest(gguf, "") == "");
    write_text(gguf + ".sha256", engine::sha256_file(gguf) + "  m.gguf\n");
    CHECK(engine::find_manifest(gguf, "") == gguf + ".sha256");
    CHECK(engine::default_manifest_path(gguf) == gguf + ".sha256");
    // A GGUF file's manifest names it relative to its directory.
    auto r = engine::verify_manifest(gguf + ".sha256", gguf, {});
    CHECK(r.verified());
    CHECK(r.files == 1);
    CHECK(r.bytes == 4);
  }

  TEST_CASE("manifest: a good manifest verifies every file, several at a time") {
    Checkpoint c("good");
    c.write_sums();
    const auto r = engine::verify_manifest(c.path("SHA256SUMS"), c.path(), threads(3));
    CHECK_MESSAGE(r.verified(), (r.problems.empty() ? "" : r.problems.front()));
    CHECK(r.files == 6);
    CHECK(r.threads == 3);
    uint64_t total = 0;
    for (const auto& e : fs::directory_iterator(c.dir))
      if (e.path().filename() != "SHA256SUMS") total += e.file_size();
    CHECK(r.bytes == total);
    // "./name" and an absolute path name the same files.
    std::string text;
    for (const auto& e : engine::parse_manifest(c.write_sums(), "SUMS"))
      text += e.digest + (e.name == "model.safetensors" ? "  ./" + e.name : "  " + c.path(e.name)) + "\n";
    write_text(c.dir / "OTHER", text);
    CHECK(engine::verify_manifest(c.path("OTHER"), c.path(), {}).verified());
    // `sha256sum * > SHA256SUMS` lists the manifest too, with the empty file's digest: passed over.
    fs::remove(c.dir / "OTHER");
    write_text(c.dir / "SHA256SUMS", c.write_sums() + kEmpty + "  SHA256SUMS\n");
    const auto self = engine::verify_manifest(c.path("SHA256SUMS"), c.path(), {});
    CHECK(self.verified());
    CHECK(self.files == 6);
  }

  TEST_CASE("manifest: a flipped byte is a mismatch naming the file and both digests") {
    Checkpoint c("flip");
    c.write_sums();
    const std::string weights = c.path("model.safetensors");
    const std::string expected = engine::sha256_file(weights);
    flip_byte(weights, 100000);
    const std::string actual = engine::sha256_file(weights);
    REQUIRE(actual != expected);
    const auto r = engine::verify_manifest(c.path("SHA256SUMS"), c.path(), {});
    CHECK_FALSE(r.verified());
    REQUIRE(r.problems.size() == 1);
    CHECK(r.problems[0] == weights + ": SHA-256 mismatch: expected " + expected + ", actual " + actual + " (line 4 of " +
                               c.path("SHA256SUMS") + ")");
  }

  TEST_CASE("manifest: a missing file and an unnamed weight file are refused") {
    Checkpoint c("missing");
    c.write_sums();
    fs::remove(c.dir / "tokenizer_config.json");
    auto r = engine::verify_manifest(c.path("SHA256SUMS"), c.path(), {});
    REQUIRE(r.problems.size() == 1);
    CHECK(r.problems[0] == c.path("tokenizer_config.json") + ": missing (named on line 6 of " + c.path("SHA256SUMS") + ")");

    // A manifest naming only the tokenizer files: the weights it leaves out are refused.
    Checkpoint u("unnamed");
    write_text(u.dir / "SHA256SUMS", engine::sha256_file(u.path("tokenizer.json")) + "  tokenizer.json\n");
    r = engine::verify_manifest(u.path("SHA256SUMS"), u.path(), {});
    REQUIRE(r.problems.size() == 1);
    CHECK(r.problems[0] ==
          u.path("model.safetensors") + ": a weight file the model loads, not named by " + u.path("SHA256SUMS"));
  }

  TEST_CASE("manifest: every shard of a sharded checkpoint is hashed; an unnamed shard is refused") {
    const fs::path dir = fs::temp_directory_path() / ("inferd-shards-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    constexpr int kShards = 12;
    std::string map, sums;
    for (int i = 1; i <= kShards; ++i) {
      const std::string name = "model-" + std::to_string(i) + "-of-12.safetensors";
      write_text(dir / name, std::string(static_cast<size_t>(1000 * i), static_cast<char>('a' + i)));
      map += std::string(map.empty() ? "" : ",") + "\"t" + std::to_string(i) + "\":\"" + name + "\"";
      if (i != 7) sums += engine::sha256_file((dir / name).string()) + "  " + name + "\n";
    }
    write_text(dir / "model.safetensors.index.json", "{\"weight_map\":{" + map + "}}");
    write_text(dir / "SHA256SUMS", sums);
    std::atomic<size_t> calls{0};
    engine::VerifyProgress last;
    auto opts = threads(4);
    opts.on_progress = [&](const engine::VerifyProgress& p) {
      ++calls;
      last = p;
    };
    auto r = engine::verify_manifest((dir / "SHA256SUMS").string(), dir.string(), opts);
    CHECK(r.files == kShards - 1);
    CHECK(r.threads == 4);
    REQUIRE(r.problems.size() == 1);
    CHECK(r.problems[0] == (dir / "model-7-of-12.safetensors").string() + ": a weight file the model loads, not named by " +
                               (dir / "SHA256SUMS").string());
    CHECK(calls > 0);
    CHECK(last.files_done == kShards - 1);
    CHECK(last.bytes_done == last.bytes_total);
    CHECK(last.bytes_total == r.bytes);
    // Cancelled: stops with an error, not a report.
    auto stop = threads(2);
    stop.cancelled = [] { return true; };
    CHECK_THROWS_WITH_AS(engine::verify_manifest((dir / "SHA256SUMS").string(), dir.string(), stop),
                         doctest::Contains("verification stopped"), std::runtime_error);
    fs::remove_all(dir);
  }

  TEST_CASE("manifest: an unreadable or malformed manifest is a ManifestError") {
    Checkpoint c("bad");
    const std::string unreadable = c.path("NOPE") + ": cannot read: No such file or directory";
    CHECK_THROWS_WITH_AS(engine::verify_manifest(c.path("NOPE"), c.path(), {}), unreadable.c_str(),
                         engine::ManifestError);
    write_text(c.dir / "SHA256SUMS", std::string(kAbc) + "  config.json\nnot a line\n");
    const std::string malformed = c.path("SHA256SUMS") + ": line 2: not '<64 hex digits>  NAME'";
    CHECK_THROWS_WITH_AS(engine::verify_manifest(c.path("SHA256SUMS"), c.path(), {}),
                         doctest::Contains(malformed.c_str()), engine::ManifestError);
  }

  TEST_CASE("manifest: the daemon's check reports verified, no manifest, or fails naming the file") {
    Checkpoint c("daemon");
    daemon::Config cfg;
    cfg.model.path = c.path();
    std::vector<std::string> activity;
    auto note = [&](const std::string& s) { activity.push_back(s); };
    auto never = [] { return false; };
    auto i = daemon::verify_model_integrity(cfg, note, never);
    CHECK(i.status == "no_manifest");
    c.write_sums();
    i = daemon::verify_model_integrity(cfg, note, never);
    CHECK(i.status == "verified");
    CHECK(i.manifest == c.path("SHA256SUMS"));
    CHECK(i.files == 6);
    REQUIRE_FALSE(activity.empty());
    CHECK(activity.back() == "verifying checksums 100% (6/6 files)");
    flip_byte(c.path("config.json"), 10);
    const std::string mismatch = "checkpoint integrity: " + c.path() + " does not match " + c.path("SHA256SUMS") +
                                 ": " + c.path("config.json") + ": SHA-256 mismatch: expected ";
    CHECK_THROWS_WITH_AS(daemon::verify_model_integrity(cfg, note, never), doctest::Contains(mismatch.c_str()),
                         std::runtime_error);
    cfg.model.manifest = c.path("GIVEN");
    const std::string missing = "checkpoint integrity: manifest " + c.path("GIVEN") + ": cannot read: No such file or directory";
    CHECK_THROWS_WITH_AS(daemon::verify_model_integrity(cfg, note, never), missing.c_str(), std::runtime_error);
  }
}
