// The pool of KV blocks: refcounts, a free list in LRU order, and the prefix
// cache's index from a block's content hash to the block that holds it.
#pragma once
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

namespace inferd::engine {

// Refcounted block allocator with an optional prefix cache: a full block whose
// content hash (chained with its predecessors) is registered can be found again
// and shared. Freed cached blocks stay findable until they are reused (LRU).
class BlockAllocator {
 public:
  explicit BlockAllocator(int num_blocks);

  int num_blocks() const { return static_cast<int>(refcount_.size()); }
  int num_free() const { return static_cast<int>(free_count_); }
  int num_used() const { return num_blocks() - num_free(); }

  // A fresh block with refcount 1, or nullopt when none is free.
  std::optional<int32_t> allocate();
  void retain(int32_t block);
  void release(int32_t block);

  // Prefix cache.
  std::optional<int32_t> lookup(uint64_t hash);  // retains the block on a hit
  // False when the hash is 0 or another block already holds it.
  bool register_hash(int32_t block, uint64_t hash);
  void clear_cache();

 private:
  void forget_hash(int32_t block);
  std::vector<int32_t> refcount_;
  std::vector<uint64_t> hash_of_;  // 0 = none
  std::vector<int32_t> lru_prev_, lru_next_;  // free list in LRU order: cached blocks reused last
  int32_t lru_head_ = -1, lru_tail_ = -1;
  size_t free_count_ = 0;
  std::unordered_map<uint64_t, int32_t> by_hash_;
  void lru_push_back(int32_t b);
  void lru_remove(int32_t b);
};

}  // namespace inferd::engine
