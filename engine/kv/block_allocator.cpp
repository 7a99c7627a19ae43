#include "engine/kv/block_allocator.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace inferd::engine {

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

bool BlockAllocator::register_hash(int32_t b, uint64_t hash) {
  if (hash == 0 || by_hash_.count(hash)) return false;  // an identical block is already cached
  forget_hash(b);
  hash_of_[b] = hash;
  by_hash_[hash] = b;
  return true;
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
