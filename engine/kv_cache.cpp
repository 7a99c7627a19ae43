#include "engine/kv_cache.hpp"

#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

namespace inferd::engine {

size_t KvGeometry::bytes_per_block_layer() const {
  return static_cast<size_t>(block_size) * n_kv_heads * head_dim * kernels::row_bytes(type, 1);
}

size_t KvGeometry::total_bytes() const {
  return bytes_per_block_layer() * 2 * static_cast<size_t>(num_blocks) * n_layers;
}

KvCache::KvCache(const KvGeometry& g) : geo_(g) {
  if (g.n_layers <= 0 || g.n_kv_heads <= 0 || g.head_dim <= 0 || g.block_size <= 0 || g.num_blocks <= 0)
    throw std::invalid_argument("kv cache: every dimension must be positive");
  storage_bytes_ = g.total_bytes();
  // 64-byte alignment keeps every head's slot on whole cache lines for SIMD loads.
  storage_bytes_ = (storage_bytes_ + 63) / 64 * 64;
  storage_ = std::aligned_alloc(64, storage_bytes_);
  if (!storage_) throw std::bad_alloc();
  // Zeroed so a bug that reads an unwritten slot gives zeros, not garbage.
  std::memset(storage_, 0, storage_bytes_);
}

KvCache::~KvCache() { std::free(storage_); }

kernels::KvLayerView KvCache::layer(int l) const {
  const size_t half = geo_.bytes_per_block_layer() * geo_.num_blocks;
  auto* base = static_cast<char*>(storage_) + 2 * half * static_cast<size_t>(l);
  return kernels::KvLayerView{geo_.type, base, base + half, geo_.block_size, geo_.n_kv_heads, geo_.head_dim};
}

BlockAllocator::BlockAllocator(int num_blocks)
    : refcount_(num_blocks, 0), hash_of_(num_blocks, 0), lru_prev_(num_blocks, -1), lru_next_(num_blocks, -1) {
  for (int32_t b = 0; b < num_blocks; ++b) lru_push_back(b);
}

void BlockAllocator::lru_push_back(int32_t b) {
  lru_prev_[b] = lru_tail_;
  lru_next_[b] = -1;
  if (lru_tail_ >= 0) lru_next_[lru_tail_] = b; else lru_head_ = b;
  lru_tail_ = b;
  ++free_count_;
}

void BlockAllocator::lru_remove(int32_t b) {
  if (lru_prev_[b] >= 0) lru_next_[lru_prev_[b]] = lru_next_[b]; else lru_head_ = lru_next_[b];
  if (lru_next_[b] >= 0) lru_prev_[lru_next_[b]] = lru_prev_[b]; else lru_tail_ = lru_prev_[b];
  lru_prev_[b] = lru_next_[b] = -1;
  --free_count_;
}

std::optional<int32_t> BlockAllocator::allocate() {
  if (lru_head_ < 0) return std::nullopt;
  int32_t b = lru_head_;
  lru_remove(b);
  forget_hash(b);  // its old content is about to be overwritten
  refcount_[b] = 1;
  return b;
}

void BlockAllocator::retain(int32_t b) {
  if (refcount_[b]++ == 0) lru_remove(b);
}

void BlockAllocator::release(int32_t b) {
  if (refcount_[b] <= 0) throw std::logic_error("kv block " + std::to_string(b) + " released twice");
  if (--refcount_[b] == 0) {
    if (hash_of_[b] != 0) {
      lru_push_back(b);  // cached content: reuse last
    } else {
      // Plain block: reuse first, so cached prefixes survive longer.
      lru_prev_[b] = -1;
      lru_next_[b] = lru_head_;
      if (lru_head_ >= 0) lru_prev_[lru_head_] = b; else lru_tail_ = b;
      lru_head_ = b;
      ++free_count_;
    }
  }
}

std::optional<int32_t> BlockAllocator::lookup(uint64_t hash) {
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return std::nullopt;
  retain(it->second);
  return it->second;
}

void BlockAllocator::register_hash(int32_t b, uint64_t hash) {
  if (hash == 0 || by_hash_.count(hash)) return;  // an identical block is already cached
  forget_hash(b);
  hash_of_[b] = hash;
  by_hash_[hash] = b;
}

void BlockAllocator::forget_hash(int32_t b) {
  if (hash_of_[b] != 0) {
    by_hash_.erase(hash_of_[b]);
    hash_of_[b] = 0;
  }
}

void BlockAllocator::clear_cache() {
  by_hash_.clear();
  std::fill(hash_of_.begin(), hash_of_.end(), 0);
}

}  // namespace inferd::engine
