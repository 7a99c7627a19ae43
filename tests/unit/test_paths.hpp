// Where unit tests find the default model and the source tree.
#pragma once
#include <cstdlib>
#include <string>

namespace test_paths {

inline std::string default_model() {
  if (const char* m = std::getenv("INFERD_MODEL")) return m;
  std::string cache;
  if (const char* c = std::getenv("INFERD_CACHE")) cache = c;
  else if (const char* x = std::getenv("XDG_CACHE_HOME")) cache = std::string(x) + "/inferd";
  else cache = std::string(std::getenv("HOME") ? std::getenv("HOME") : "/root") + "/.cache/inferd";
  return cache + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

inline std::string source_dir() {
  if (const char* s = std::getenv("INFERD_SOURCE_DIR")) return s;
  return INFERD_TEST_SOURCE_DIR;
}

}  // namespace test_paths
