// A model's share of a tensor-parallel group (Megatron-style): the attention
// heads, feed-forward columns and output vocabulary are split across ranks; two
// all-reduces per layer (after the attention output and the feed-forward down
// projection) and one all-gather of the logits put the pieces together. Rank 0
// of a group of 1 is the whole model.
#pragma once
#include <cstdint>
#include <utility>

#include "comm/collectives.hpp"

namespace inferd::engine {

struct TensorParallel {
  int rank = 0;
  int size = 1;
  // The group's data plane; null for a group of 1, and for a model loaded only
  // to trace its shapes (it then runs its rank's shapes without communicating).
  comm::Collectives* comm = nullptr;

  // Whether this rank's forward pass runs the group's collectives: a group of
  // more than one, or a group of one given a data plane, which then meets
  // itself in each of them (how a GPU rank's data path runs on one GPU).
  bool collective() const { return size > 1 || comm != nullptr; }
};

// Rank `rank`'s part [begin, end) of `units` indivisible units (kv heads, blocks
// of feed-forward columns) split as evenly as they go: the first `units % size`
// ranks take one more. Every rank gets at least one unit when units >= size.
inline std::pair<int64_t, int64_t> split_units(int64_t units, int size, int rank) {
  const int64_t base = units / size, extra = units % size;
  const int64_t begin = rank * base + (rank < extra ? rank : extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

}  // namespace inferd::engine
