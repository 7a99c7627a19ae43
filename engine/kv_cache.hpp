// The paged KV cache: per layer, `num_blocks` blocks of `block_size` token slots.
// Blocks are handed out by a refcounting allocator so sequences that share a
// prefix can share its blocks (the prefix cache keys full blocks by hash).
#pragma once
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "kernels/backend.hpp"

namespace inferd::engine {

struct KvGeometry {
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int block_size = 16;
  int num_blocks = 0;
  kernels::DType type = kernels::DType::F16;

  size_t bytes_per_block_layer() const;  // one of K or V
  size_t total_bytes() const;
};

class KvCache {
 public:
  explicit KvCache(const KvGeometry& g);
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;
  ~KvCache();

  const KvGeometry& geometry() const { return geo_; }
  kernels::KvLayerView layer(int l) const;

 private:
  KvGeometry geo_;
  void* storage_ = nullptr;  // [layer][k|v][block][slot][head][dim]
  size_t storage_bytes_ = 0;
};

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
  void register_hash(int32_t block, uint64_t hash);
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
