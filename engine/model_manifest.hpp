// Checkpoint integrity: a model's files checked against a manifest of SHA-256
// digests in the format `sha256sum` writes (and `sha256sum -c` reads), before
// the load maps them.
//
// Where the manifest is: given explicitly ([model] manifest, --model-manifest),
// else SHA256SUMS inside a checkpoint directory, else NAME.gguf.sha256 beside a
// GGUF file. Relative names in it are relative to the checkpoint directory (the
// GGUF file's directory), as for `cd DIR && sha256sum -c MANIFEST`.
//
// Every file the manifest names is hashed (streamed, several files at once),
// and every file the model's weights are read from must be named.
#pragma once
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace inferd::engine {

// A manifest that cannot be read or parsed. what() = "<file>: line <n>: <message>"
// (no line part when line is 0: the file itself could not be read).
struct ManifestError : std::runtime_error {
  std::string file;
  int line;
  ManifestError(std::string file, int line, const std::string& message);
};

struct ManifestEntry {
  std::string name;    // as the manifest spells it (escapes undone)
  std::string digest;  // 64 lowercase hex digits
  int line = 0;
};

// Parses `sha256sum` output: "<hex>  <name>" (text mode), "<hex> *<name>"
// (binary mode), a leading backslash where the name escapes "\\" and "\n", and
// the BSD form `sha256sum --tag` writes, "SHA256 (<name>) = <hex>". Hex digits
// may be either case; a trailing CR is dropped; blank lines are skipped. Any
// other line, a name listed twice, or no entry at all is a ManifestError naming
// `file` and the line.
std::vector<ManifestEntry> parse_manifest(std::string_view text, const std::string& file);

// Where a manifest beside `model_path` would be: DIR/SHA256SUMS for a
// directory, FILE.sha256 for a file.
std::string default_manifest_path(const std::string& model_path);

// The manifest that goes with `model_path`: `explicit_path` when not empty (even
// if it does not exist: verification then fails), else DIR/SHA256SUMS for a
// directory, else FILE.sha256 beside a file; "" when there is none.
std::string find_manifest(const std::string& model_path, const std::string& explicit_path);

// The files a load reads weights from, which a manifest must name: the GGUF
// file itself, or a checkpoint's model.safetensors or the shards its
// model.safetensors.index.json lists. Throws LoadError as the load would.
std::vector<std::string> model_weight_files(const std::string& model_path);

// The SHA-256 of a file as 64 lowercase hex digits, read a few MiB at a time.
// `on_bytes` hears of each piece read; `cancelled` returning true stops the
// read (std::runtime_error). Throws std::runtime_error naming the file.
std::string sha256_file(const std::string& path, const std::function<void(uint64_t)>& on_bytes = {},
                        const std::function<bool()>& cancelled = {});

struct VerifyProgress {
  uint64_t bytes_done = 0, bytes_total = 0;
  size_t files_done = 0, files_total = 0;
};

struct VerifyOptions {
  int threads = 0;  // files hashed at once; 0: one per core this process may run on
  // Called from the hashing threads, one at a time, after each piece read.
  std::function<void(const VerifyProgress&)> on_progress;
  std::function<bool()> cancelled;  // true: stop (std::runtime_error)
};

struct ManifestReport {
  std::string manifest;  // the manifest's path
  size_t files = 0;      // files it names (a line naming the manifest itself is passed over)
  uint64_t bytes = 0;    // their bytes, all hashed
  double seconds = 0;
  int threads = 0;
  // One line per problem, each naming the file (and for a mismatch the
  // expected and actual digests); empty: every file matched.
  std::vector<std::string> problems;
  bool verified() const { return problems.empty(); }
};

// Checks `model_path` against the manifest at `manifest`: each named file
// must exist and match its digest, and each of model_weight_files() must be
// named. Throws ManifestError when the manifest cannot be read or parsed; a
// missing, unreadable or differing file is a problem in the report.
ManifestReport verify_manifest(const std::string& manifest, const std::string& model_path,
                               const VerifyOptions& options = {});

}  // namespace inferd::engine
