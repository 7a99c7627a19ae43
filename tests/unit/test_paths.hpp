// Where unit tests find the default model and the source tree.
#pragma once
#include <cstdlib>
#include <string>

#include "daemon/config.hpp"

namespace test_paths {

inline std::string default_model() {
  if (const char* m = std::getenv("INFERD_MODEL")) return m;
  return inferd::daemon::default_model_path();
}

inline std::string source_dir() {
  if (const char* s = std::getenv("INFERD_SOURCE_DIR")) return s;
  return INFERD_TEST_SOURCE_DIR;
}

}  // namespace test_paths
