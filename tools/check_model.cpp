// `inferctl check-model DIR`: the checkpoint gate the daemon runs in Loading
// (checksum manifest, then the structural gate), alone, so a download can be
// checked before a daemon is pointed at it.
#include <iostream>
#include <string>

#include "engine/checkpoint_gate.hpp"
#include "engine/model_manifest.hpp"
#include "tools/inferctl_commands.hpp"

namespace inferd::tools {

namespace {

constexpr const char* kUsage =
    "usage: inferctl check-model DIR [--manifest FILE]\n"
    "Checks the Hugging Face checkpoint in DIR as inferd does while Loading: the files are\n"
    "hashed against FILE (default DIR/SHA256SUMS, when it exists), then every shard the\n"
    "index names is mapped and its header checked, and every parameter config.json's\n"
    "model_type needs (today: deepseek_v4) is looked up with its exact dtype and shape.\n"
    "Prints one line per check and each problem, naming the file and tensor.\n"
    "Exit 0 when every check passes, 1 when one fails, 2 for bad arguments.\n";

bool verify_checksums(const std::string& dir, const std::string& manifest_flag) {
  const std::string manifest = engine::find_manifest(dir, manifest_flag);
  if (manifest.empty()) {
    std::cout << "no checksum manifest (" << engine::default_manifest_path(dir) << "): files not hashed\n";
    return true;
  }
  try {
    const auto r = engine::verify_manifest(manifest, dir);
    for (const auto& p : r.problems) std::cout << "problem: " << p << "\n";
    const size_t bad = r.problems.size();
    std::cout << (r.files >= bad ? r.files - bad : 0) << "/" << r.files << " files verified against " << manifest << "\n";
    return r.verified();
  } catch (const engine::ManifestError& e) {
    std::cout << "problem: manifest " << e.what() << "\n";
    return false;
  }
}

}  // namespace

int cmd_check_model(const Args& args) {
  if (args.has("help")) {
    std::cout << kUsage;
    return 0;
  }
  args.allow_only({"manifest", "help"});
  if (args.positional.size() != 1) throw std::invalid_argument("expected one checkpoint directory (see --help)");
  const std::string dir = args.positional[0];
  const std::string type = engine::checkpoint_model_type(dir);
  if (!engine::gate_knows(type)) {
    std::cerr << "inferctl check-model: " << dir << ": "
              << (type.empty() ? "not a checkpoint directory with a config.json model_type"
                               : "no checkpoint gate for model_type '" + type + "' (only deepseek_v4)")
              << "\n";
    return 2;
  }
  bool ok = verify_checksums(dir, args.get("manifest", ""));
  const auto r = engine::check_checkpoint(dir, [](const std::string& line) { std::cout << line << "\n"; });
  for (const auto& p : r.problems) std::cout << "problem: " << p << "\n";
  ok = ok && r.passed();
  std::cout << (ok ? "checkpoint passes the gate\n" : "checkpoint FAILS the gate\n");
  return ok ? 0 : 1;
}

}  // namespace inferd::tools
