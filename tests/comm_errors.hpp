// Helpers the collectives' tests share (CPU and GPU suites).
#pragma once
#include <string>

#include "comm/collectives.hpp"

namespace comm_test {

// The message of the CollectiveError that `fn` throws ("" if none).
template <class F>
std::string error_of(F&& fn) {
  try {
    fn();
  } catch (const inferd::comm::CollectiveError& e) {
    return e.what();
  }
  return "";
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace comm_test
