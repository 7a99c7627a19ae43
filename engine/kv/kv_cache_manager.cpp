#include "engine/kv/kv_cache_manager.hpp"

#include <algorithm>

namespace inferd::engine {

uint64_t block_hash(uint64_t prev, std::span<const int32_t> toks) {
  uint64_t h = prev ^ 0x9e3779b97f4a7c15ull;
  for (int32_t t : toks) {
    h ^= static_cast<uint32_t>(t) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
  }
  return h == 0 ? 1 : h;
}

KvCacheManager::KvCacheManager(int num_blocks, int block_size, bool enable_prefix_caching, BlockHasher hasher)
    : blocks_(num_blocks),
      hash_(hasher),
      block_size_(block_size),
      prefix_caching_(enable_prefix_caching),
      block_tokens_(enable_prefix_caching ? static_cast<size_t>(num_blocks) * block_size : 0),
      block_parent_(enable_prefix_caching ? num_blocks : 0) {}

const std::vector<int32_t>& KvCacheManager::block_table(SeqId seq) const {
  static const std::vector<int32_t> kNone;
  auto it = tables_.find(seq);
  return it == tables_.end() ? kNone : it->second.table;
}

bool KvCacheManager::holds(int32_t block, uint64_t parent, std::span<const int32_t> toks) const {
  const int32_t* mine = block_tokens_.data() + static_cast<size_t>(block) * block_size_;
  return block_parent_[block] == parent && std::equal(toks.begin(), toks.end(), mine);
}

int KvCacheManager::computed_blocks(SeqId seq, std::span<const int32_t> tokens) {
  if (!prefix_caching_ || holds_blocks(seq)) return 0;
  const int full = (static_cast<int>(tokens.size()) - 1) / block_size_;
  SeqBlocks sb;
  for (int i = 0; i < full; ++i) {
    const auto toks = tokens.subspan(static_cast<size_t>(i) * block_size_, block_size_);
    const uint64_t h = hash_(sb.last_hash, toks);
    auto b = blocks_.lookup(h);
    if (!b) break;
    if (!holds(*b, sb.last_hash, toks)) {  // a collision: another prefix's block
      blocks_.release(*b);
      break;
    }
    sb.table.push_back(*b);
    sb.last_hash = h;
    ++sb.n_hashed;
  }
  const int hit = sb.n_hashed * block_size_;
  if (!sb.table.empty()) tables_.emplace(seq, std::move(sb));
  return hit;
}

bool KvCacheManager::allocate_slots(SeqId seq, int total_tokens) {
  const size_t need = static_cast<size_t>((total_tokens + block_size_ - 1) / block_size_);
  auto& table = tables_[seq].table;
  if (table.size() >= need) return true;
  if (static_cast<size_t>(blocks_.num_free()) < need - table.size()) {
    if (table.empty()) tables_.erase(seq);
    return false;
  }
  while (table.size() < need) table.push_back(*blocks_.allocate());
  return true;
}

void KvCacheManager::cache_full_blocks(SeqId seq, std::span<const int32_t> tokens, int n_computed) {
  if (!prefix_caching_) return;
  auto it = tables_.find(seq);
  if (it == tables_.end()) return;
  SeqBlocks& sb = it->second;
  while ((sb.n_hashed + 1) * block_size_ <= n_computed) {
    const auto toks = tokens.subspan(static_cast<size_t>(sb.n_hashed) * block_size_, block_size_);
    const int32_t b = sb.table[sb.n_hashed];
    const uint64_t parent = sb.last_hash;
    sb.last_hash = hash_(parent, toks);
    if (blocks_.register_hash(b, sb.last_hash)) {
      std::copy(toks.begin(), toks.end(), block_tokens_.begin() + static_cast<ptrdiff_t>(b) * block_size_);
      block_parent_[b] = parent;
    }
    ++sb.n_hashed;
  }
}

void KvCacheManager::trim(SeqId seq, int total_tokens) {
  auto it = tables_.find(seq);
  if (it == tables_.end()) return;
  auto& table = it->second.table;
  const size_t keep = std::max<size_t>(static_cast<size_t>((std::max(total_tokens, 0) + block_size_ - 1) / block_size_),
                                       static_cast<size_t>(it->second.n_hashed));
  while (table.size() > keep) {
    blocks_.release(table.back());
    table.pop_back();
  }
}

void KvCacheManager::free(SeqId seq) {
  auto it = tables_.find(seq);
  if (it == tables_.end()) return;
  for (int32_t b : it->second.table) blocks_.release(b);
  tables_.erase(it);
}

void KvCacheManager::drop_prefix_cache() { blocks_.clear_cache(); }

}  // namespace inferd::engine
