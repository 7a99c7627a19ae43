#include "daemon/model_integrity.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "engine/checkpoint_gate.hpp"
#include "engine/model_manifest.hpp"

namespace inferd::daemon {

ModelIntegrity verify_model_integrity(const Config& cfg, const std::function<void(const std::string&)>& activity,
                                      const std::function<bool()>& stopping) {
  const std::string& model = cfg.model.path;
  const std::string manifest = engine::find_manifest(model, cfg.model.manifest);
  if (manifest.empty()) {
    spdlog::info("checkpoint integrity: no manifest at {} and none given (--model-manifest): {} is not verified",
                 engine::default_manifest_path(model), model);
    ModelIntegrity none;
    none.status = "no_manifest";
    return none;
  }
  spdlog::info("checkpoint integrity: verifying {} against {}", model, manifest);
  engine::VerifyOptions opts;
  opts.threads = static_cast<int>(cfg.engine.threads);
  opts.cancelled = stopping;
  // Once per 10 % step, and when the last file is done.
  opts.on_progress = [&activity, shown = std::pair(-1, false)](const engine::VerifyProgress& p) mutable {
    const int tenth = p.bytes_total ? static_cast<int>(10 * p.bytes_done / p.bytes_total) : 10;
    const std::pair step(tenth, p.files_done == p.files_total);
    if (step == shown) return;
    shown = step;
    activity(fmt::format("verifying checksums {}% ({}/{} files)", 10 * tenth, p.files_done, p.files_total));
  };
  engine::ManifestReport r;
  try {
    r = engine::verify_manifest(manifest, model, opts);
  } catch (const engine::ManifestError& e) {
    throw std::runtime_error(fmt::format("checkpoint integrity: manifest {}", e.what()));
  }
  if (!r.verified()) {
    for (const auto& p : r.problems) spdlog::error("checkpoint integrity: {}", p);
    const size_t n = r.problems.size();
    throw std::runtime_error(fmt::format("checkpoint integrity: {} does not match {}: {}{}", model, manifest,
                                         r.problems.front(), n > 1 ? fmt::format(" (and {} more above)", n - 1) : ""));
  }
  spdlog::info("checkpoint integrity: {} {} ({:.1f} MiB) match {} ({:.2f} s, {} at once)", r.files,
               r.files == 1 ? "file" : "files", r.bytes / 1048576.0, manifest, r.seconds, r.threads);
  return {.status = "verified", .manifest = manifest, .files = r.files, .bytes = r.bytes, .seconds = r.seconds};
}

void gate_model_structure(const Config& cfg, const std::function<void(const std::string&)>& activity) {
  const std::string& model = cfg.model.path;
  const std::string type = engine::checkpoint_model_type(model);
  if (!engine::gate_knows(type)) return;
  spdlog::info("checkpoint gate: checking {} ({}) against its config.json", model, type);
  activity("checkpoint gate: reading shards");
  const auto r = engine::check_checkpoint(model, [&](const std::string& line) {
    spdlog::info("checkpoint gate: {}", line);
    activity("checkpoint gate: " + line);
  });
  if (!r.passed()) {
    constexpr size_t kShown = 20;  // a config/weights mismatch can name every expert
    for (size_t i = 0; i < std::min(r.problems.size(), kShown); ++i) spdlog::error("checkpoint gate: {}", r.problems[i]);
    const size_t n = r.problems.size();
    if (n > kShown) spdlog::error("checkpoint gate: ... and {} more problems", n - kShown);
    throw std::runtime_error(fmt::format("checkpoint gate: {}{}", r.problems.front(),
                                         n > 1 ? fmt::format(" (and {} more problems, see the log)", n - 1) : ""));
  }
  spdlog::info("checkpoint gate: passed ({})", fmt::join(r.lines, "; "));
}

}  // namespace inferd::daemon
