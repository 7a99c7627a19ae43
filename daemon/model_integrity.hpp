// The model's checksum manifest, checked in Loading before the load reads a
// byte of it (engine/model_manifest.hpp says where the manifest is found and
// what it must hold). A model with no manifest logs one line and loads.
#pragma once
#include <functional>
#include <string>

#include "daemon/config.hpp"
#include "daemon/health_routes.hpp"

namespace inferd::daemon {

// Hashes the files [model] manifest (or the one beside the model) names on
// [engine] threads cores (0: all), telling `activity` every 10 %. Every problem
// (a missing file, a digest mismatch with both digests, a weight file the
// manifest does not name) is logged as an error; then std::runtime_error, so
// start-up fails. `stopping` returning true ends the hashing early.
ModelIntegrity verify_model_integrity(const Config& cfg, const std::function<void(const std::string&)>& activity,
                                      const std::function<bool()>& stopping);

// The structural checkpoint gate (engine/checkpoint_gate.hpp) for a checkpoint
// directory whose config.json model_type the gate knows (deepseek_v4); other
// models pass untouched. Each line goes to the log and to `activity`; a
// problem is logged naming the file and tensor, then std::runtime_error.
void gate_model_structure(const Config& cfg, const std::function<void(const std::string&)>& activity);

}  // namespace inferd::daemon
