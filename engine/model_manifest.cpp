#include "engine/model_manifest.hpp"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <openssl/evp.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

#include "engine/hf_checkpoint.hpp"

namespace inferd::engine {

namespace fs = std::filesystem;

namespace {

std::string where(const std::string& file, int line) {
  return line > 0 ? file + ": line " + std::to_string(line) : file;
}

bool is_hex_digest(std::string_view s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// sha256sum escapes a name holding a backslash or newline: the line starts
// with "\" and the name spells them "\\" and "\n".
bool unescape(std::string& name) {
  std::string out;
  for (size_t i = 0; i < name.size(); ++i) {
    if (name[i] != '\\') {
      out += name[i];
      continue;
    }
    if (++i == name.size()) return false;
    if (name[i] == '\\') out += '\\';
    else if (name[i] == 'n') out += '\n';
    else return false;
  }
  name = std::move(out);
  return true;
}

// Cores this process may run on (a cgroup or affinity mask may allow fewer than the machine has).
int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

std::string hex(const unsigned char* p, unsigned n) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (unsigned i = 0; i < n; ++i) {
    out[2 * i] = digits[p[i] >> 4];
    out[2 * i + 1] = digits[p[i] & 15];
  }
  return out;
}

// Relative names are relative to the checkpoint directory or the GGUF file's directory.
fs::path model_base(const std::string& model_path) {
  std::error_code ec;
  if (fs::is_directory(model_path, ec)) return fs::path(model_path);
  const fs::path parent = fs::path(model_path).parent_path();
  return parent.empty() ? fs::path(".") : parent;
}

// One spelling per file, so a manifest's "./a" and the load's "DIR/a" compare equal.
std::string same_file_key(const fs::path& p) {
  std::error_code ec;
  fs::path c = fs::weakly_canonical(p, ec);
  return (ec ? p.lexically_normal() : c).string();
}

}  // namespace

ManifestError::ManifestError(std::string f, int l, const std::string& message)
    : std::runtime_error(where(f, l) + ": " + message), file(std::move(f)), line(l) {}

std::vector<ManifestEntry> parse_manifest(std::string_view text, const std::string& file) {
  std::vector<ManifestEntry> entries;
  std::map<std::string, int> seen;
  int line_no = 0;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string line(text.substr(0, nl));
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    auto fail = [&](const std::string& msg) -> void { throw ManifestError(file, line_no, msg); };
    const bool escaped = line.front() == '\\';
    if (escaped) line.erase(0, 1);
    ManifestEntry e;
    e.line = line_no;
    if (line.starts_with("SHA256 (")) {
      // BSD form: SHA256 (name) = hex
      const size_t close = line.rfind(") = ");
      if (close == std::string::npos || close < 8) fail("not 'SHA256 (NAME) = DIGEST'");
      e.name = line.substr(8, close - 8);
      e.digest = line.substr(close + 4);
      if (!is_hex_digest(e.digest)) fail("the digest is not 64 hex digits (is this a SHA-256 manifest?)");
    } else {
      const size_t sp = line.find(' ');
      const std::string digest = line.substr(0, sp);
      if (!is_hex_digest(digest)) {
        if (const size_t paren = line.find(" ("); paren != std::string::npos && paren < sp + 1)
          fail("a " + line.substr(0, paren) + " line: only SHA-256 digests are read");
        fail("not '<64 hex digits>  NAME' as sha256sum writes (the digest is " +
             (digest.size() == 64 ? std::string("not hex") : std::to_string(digest.size()) + " characters, need 64") +
             ")");
      }
      // sha256sum writes the digest, a space, then ' ' (text) or '*' (binary), then the name.
      if (sp == std::string::npos || sp + 2 > line.size() || (line[sp + 1] != ' ' && line[sp + 1] != '*'))
        fail("no file name after the digest (need two spaces, or ' *', between them)");
      e.digest = digest;
      e.name = line.substr(sp + 2);
    }
    if (e.name.empty()) fail("no file name after the digest");
    if (escaped && !unescape(e.name)) fail("a backslash in the name escapes neither '\\' nor 'n'");
    e.digest = lower(e.digest);
    if (const auto [it, fresh] = seen.emplace(e.name, line_no); !fresh)
      fail("'" + e.name + "' is listed again (first on line " + std::to_string(it->second) + ")");
    entries.push_back(std::move(e));
  }
  if (entries.empty()) throw ManifestError(file, 0, "names no file");
  return entries;
}

std::string default_manifest_path(const std::string& model_path) {
  std::error_code ec;
  std::string path = model_path;
  if (!fs::is_directory(model_path, ec)) return path + ".sha256";
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path + "/SHA256SUMS";
}

std::string find_manifest(const std::string& model_path, const std::string& explicit_path) {
  if (!explicit_path.empty()) return explicit_path;
  const std::string path = default_manifest_path(model_path);
  std::error_code ec;
  return fs::exists(path, ec) ? path : "";
}

std::vector<std::string> model_weight_files(const std::string& model_path) {
  std::error_code ec;
  if (!fs::is_directory(model_path, ec)) return {model_path};
  std::vector<std::string> out;
  for (const auto& name : checkpoint_weight_files(model_path)) out.push_back((fs::path(model_path) / name).string());
  return out;
}

std::string sha256_file(const std::string& path, const std::function<void(uint64_t)>& on_bytes,
                        const std::function<bool()>& cancelled) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error(path + ": " + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1)
    throw std::runtime_error("OpenSSL could not set up SHA-256");
  // Large enough that a read is mostly disk time; small enough for 48 at once.
  constexpr size_t kPiece = 4 << 20;
  const std::unique_ptr<unsigned char[]> buf(new unsigned char[kPiece]);
  for (;;) {
    if (cancelled && cancelled()) throw std::runtime_error(path + ": verification stopped");
    const ssize_t n = ::read(fd, buf.get(), kPiece);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(path + ": " + std::strerror(errno));
    }
    if (n == 0) break;
    EVP_DigestUpdate(ctx.get(), buf.get(), static_cast<size_t>(n));
    if (on_bytes) on_bytes(static_cast<uint64_t>(n));
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  if (EVP_DigestFinal_ex(ctx.get(), md, &len) != 1) throw std::runtime_error("OpenSSL could not finish SHA-256");
  return hex(md, len);
}

ManifestReport verify_manifest(const std::string& manifest, const std::string& model_path, const VerifyOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  std::ifstream in(manifest, std::ios::binary);
  if (!in) throw ManifestError(manifest, 0, std::string("cannot read: ") + std::strerror(errno));
  std::stringstream text;
  text << in.rdbuf();
  const auto entries = parse_manifest(text.str(), manifest);

  ManifestReport report;
  report.manifest = manifest;
  const fs::path base = model_base(model_path);
  struct Job {
    const ManifestEntry* entry;
    std::string path;
    uint64_t size = 0;
    std::string problem;
  };
  std::vector<Job> jobs;
  std::map<std::string, const ManifestEntry*> named;
  const std::string self = same_file_key(manifest);
  for (const auto& e : entries) {
    const fs::path p = fs::path(e.name).is_absolute() ? fs::path(e.name) : base / e.name;
    // `sha256sum * > SHA256SUMS` lists the manifest itself (the shell made it
    // empty first); no file can hold its own digest, so that line is passed over.
    if (same_file_key(p) == self) continue;
    Job j{&e, p.lexically_normal().string(), 0, {}};
    std::error_code ec;
    const auto status = fs::status(j.path, ec);
    if (!fs::exists(status))
      j.problem = j.path + ": missing (named on line " + std::to_string(e.line) + " of " + manifest + ")";
    else if (!fs::is_regular_file(status))
      j.problem = j.path + ": not a regular file (named on line " + std::to_string(e.line) + " of " + manifest + ")";
    else
      j.size = fs::file_size(j.path, ec);
    named.emplace(same_file_key(j.path), &e);
    jobs.push_back(std::move(j));
  }
  for (const auto& w : model_weight_files(model_path))
    if (!named.contains(same_file_key(w)))
      report.problems.push_back(w + ": a weight file the model loads, not named by " + manifest);

  // Largest first, so one big file does not start last and run alone.
  report.files = jobs.size();
  std::vector<Job*> order;
  for (auto& j : jobs) {
    if (!j.problem.empty()) continue;
    order.push_back(&j);
    report.bytes += j.size;
  }
  std::sort(order.begin(), order.end(), [](const Job* a, const Job* b) { return a->size > b->size; });
  const int threads = std::max(1, std::min<int>(options.threads > 0 ? options.threads : usable_cores(),
                                                static_cast<int>(order.size())));
  report.threads = threads;

  std::mutex mu;
  VerifyProgress progress{0, report.bytes, 0, order.size()};
  std::atomic<size_t> next{0};
  std::atomic<bool> stop{false};
  std::string stopped;
  auto worker = [&] {
    for (size_t i; !stop && (i = next++) < order.size();) {
      Job& j = *order[i];
      try {
        const std::string actual = sha256_file(
            j.path,
            [&](uint64_t n) {
              std::lock_guard lock(mu);
              progress.bytes_done += n;
              if (options.on_progress) options.on_progress(progress);
            },
            options.cancelled);
        if (actual != j.entry->digest)
          j.problem = j.path + ": SHA-256 mismatch: expected " + j.entry->digest + ", actual " + actual +
                      " (line " + std::to_string(j.entry->line) + " of " + manifest + ")";
      } catch (const std::runtime_error& e) {
        if (options.cancelled && options.cancelled()) {
          std::lock_guard lock(mu);
          stop = true;
          stopped = e.what();
          return;
        }
        j.problem = e.what();
      }
      std::lock_guard lock(mu);
      ++progress.files_done;
      if (options.on_progress) options.on_progress(progress);
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  if (stop) throw std::runtime_error(stopped);
  // Problems in the manifest's order, after the unnamed weight files.
  for (const auto& j : jobs)
    if (!j.problem.empty()) report.problems.push_back(j.problem);
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace inferd::engine
