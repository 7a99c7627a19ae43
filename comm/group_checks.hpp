// Argument checks every Collectives implementation makes the same way.
#pragma once
#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>

namespace inferd::comm {

inline void check_rank(int rank, int size, const std::string& what) {
  if (size < 1 || rank < 0 || rank >= size)
    throw std::invalid_argument(what + ": rank " + std::to_string(rank) + " is not in a group of " + std::to_string(size));
}

// A collective over `ranks` copies of n floats must fit in memory sizes.
inline void check_count(size_t n, size_t ranks, const std::string& where) {
  if (n > std::numeric_limits<size_t>::max() / sizeof(float) / ranks)
    throw std::invalid_argument(where + ": " + std::to_string(n) + " floats is too many");
}

}  // namespace inferd::comm
