// The KV manager: which blocks each sequence holds (its block table), and the
// prefix cache over the block pool. A full block's content is keyed by a hash
// chained over its tokens and its predecessor's hash; a hit is verified against
// the tokens the block was registered with, so a hash collision is a miss and
// never hands one request another's K/V.
#pragma once
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/kv/block_allocator.hpp"

namespace inferd::engine {

using SeqId = uint64_t;

// Chains a block's tokens onto its predecessor's hash (splitmix-style mixing);
// never 0, which means "no hash".
uint64_t block_hash(uint64_t prev, std::span<const int32_t> toks);
using BlockHasher = uint64_t (*)(uint64_t prev, std::span<const int32_t> toks);

class KvCacheManager {
 public:
  // `hasher` is replaceable so tests can force collisions.
  KvCacheManager(int num_blocks, int block_size, bool enable_prefix_caching, BlockHasher hasher = block_hash);

  int num_blocks() const { return blocks_.num_blocks(); }
  int num_used_blocks() const { return blocks_.num_used(); }

  // For a sequence that holds no blocks yet: takes the longest cached prefix of
  // `tokens` in whole blocks, leaving at least the last token to compute (its
  // logits start the generation). Returns the number of tokens it covers.
  int computed_blocks(SeqId seq, std::span<const int32_t> tokens);
  // Makes the sequence's table cover `total_tokens` positions. False, with the
  // table as it was, when the pool has too few free blocks.
  bool allocate_slots(SeqId seq, int total_tokens);
  // Registers the sequence's full blocks among its first `n_computed` tokens in
  // the prefix cache.
  void cache_full_blocks(SeqId seq, std::span<const int32_t> tokens, int n_computed);
  // Shrinks the sequence's table to cover `total_tokens` positions: blocks past
  // them (which held rejected drafts) go back to the pool. Registered blocks stay.
  void trim(SeqId seq, int total_tokens);
  // Releases every block the sequence holds; a sequence it does not know is a no-op.
  void free(SeqId seq);
  // Forgets every cached prefix (blocks in use stay with their sequences).
  void drop_prefix_cache();

  // The sequence's blocks in position order (empty when it holds none).
  const std::vector<int32_t>& block_table(SeqId seq) const;
  bool holds_blocks(SeqId seq) const { return tables_.count(seq) != 0; }

 private:
  struct SeqBlocks {
    std::vector<int32_t> table;
    int n_hashed = 0;        // leading full blocks registered in the prefix cache
    uint64_t last_hash = 0;  // hash of block n_hashed - 1 (0 before the first)
  };
  // What a cached block was registered with, to verify a hit.
  bool holds(int32_t block, uint64_t parent, std::span<const int32_t> toks) const;

  BlockAllocator blocks_;
  BlockHasher hash_;
  int block_size_;
  bool prefix_caching_;
  std::unordered_map<SeqId, SeqBlocks> tables_;
  std::vector<int32_t> block_tokens_;   // [block][slot]: the tokens a registered block holds
  std::vector<uint64_t> block_parent_;  // the hash of the block before it
};

}  // namespace inferd::engine
