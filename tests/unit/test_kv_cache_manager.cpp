// The KV manager and its block pool, with no model: LRU reuse order, refcounts,
// double release, prefix reuse and its token verification, all-or-nothing slots.
#include <doctest/doctest.h>

#include <numeric>
#include <stdexcept>
#include <vector>

#include "engine/kv/block_allocator.hpp"
#include "engine/kv/kv_cache_manager.hpp"

using inferd::engine::BlockAllocator;
using inferd::engine::KvCacheManager;

namespace {

std::vector<int32_t> iota_tokens(int n, int32_t first) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

// Every block hashes alike: only the token check tells prefixes apart.
uint64_t colliding_hash(uint64_t, std::span<const int32_t>) { return 42; }

}  // namespace

TEST_SUITE("kv block allocator") {
  TEST_CASE("plain blocks are reused first, cached ones last, oldest cached first") {
    BlockAllocator a(4);
    std::vector<int32_t> b;
    for (int i = 0; i < 4; ++i) b.push_back(*a.allocate());
    CHECK_FALSE(a.allocate());
    CHECK(a.register_hash(b[0], 100));
    CHECK(a.register_hash(b[1], 101));
    a.release(b[0]);  // cached: goes to the back
    a.release(b[1]);  // cached: behind b[0]
    a.release(b[2]);  // plain: goes to the front
    CHECK(a.num_free() == 3);
    CHECK(*a.allocate() == b[2]);
    CHECK(*a.allocate() == b[0]);  // the oldest cached block is evicted first...
    CHECK_FALSE(a.lookup(100));     // ...and forgets its hash
    CHECK(*a.lookup(101) == b[1]);  // the younger one is still findable
  }

  TEST_CASE("refcounts: a shared block stays in use until its last holder releases it") {
    BlockAllocator a(2);
    const int32_t b = *a.allocate();
    CHECK(a.register_hash(b, 7));
    CHECK(*a.lookup(7) == b);  // a second holder
    a.release(b);
    CHECK(a.num_used() == 1);
    a.release(b);
    CHECK(a.num_used() == 0);
    CHECK(*a.lookup(7) == b);  // free, but its content is still cached
  }

  TEST_CASE("releasing a block twice is an error, not a corrupted free list") {
    BlockAllocator a(2);
    const int32_t b = *a.allocate();
    a.release(b);
    CHECK_THROWS_AS(a.release(b), std::logic_error);
    CHECK(a.num_free() == 2);
  }

  TEST_CASE("a hash is held by one block only") {
    BlockAllocator a(2);
    const int32_t x = *a.allocate(), y = *a.allocate();
    CHECK(a.register_hash(x, 9));
    CHECK_FALSE(a.register_hash(y, 9));
    CHECK_FALSE(a.register_hash(y, 0));
  }
}

TEST_SUITE("kv cache manager") {
  TEST_CASE("prefix reuse covers whole blocks and leaves the last token to compute") {
    KvCacheManager kv(8, 4, true);
    const auto prompt = iota_tokens(12, 1);  // three full blocks
    REQUIRE(kv.allocate_slots(1, 12));
    kv.cache_full_blocks(1, prompt, 12);
    // The same 12 tokens: only two blocks are reused, the last token is computed again.
    CHECK(kv.computed_blocks(2, prompt) == 8);
    CHECK(kv.block_table(2).size() == 2);
    CHECK(kv.block_table(2)[0] == kv.block_table(1)[0]);
    CHECK(kv.block_table(2)[1] == kv.block_table(1)[1]);
    // A longer prompt with the same start reuses all three.
    auto longer = prompt;
    longer.push_back(99);
    CHECK(kv.computed_blocks(3, longer) == 12);
    // A prompt that differs in its second block reuses only the first.
    auto other = prompt;
    other[5] = 1000;
    CHECK(kv.computed_blocks(4, other) == 4);
    CHECK(kv.num_used_blocks() == 3);  // all shared
  }

  TEST_CASE("a freed sequence's cached blocks are found again until evicted") {
    KvCacheManager kv(4, 4, true);
    const auto prompt = iota_tokens(9, 1);
    REQUIRE(kv.allocate_slots(1, 9));
    kv.cache_full_blocks(1, prompt, 9);
    kv.free(1);
    CHECK(kv.num_used_blocks() == 0);
    CHECK(kv.computed_blocks(2, prompt) == 8);
    kv.free(2);
    // Filling the whole pool evicts them.
    REQUIRE(kv.allocate_slots(3, 16));
    kv.free(3);
    CHECK(kv.computed_blocks(4, prompt) == 0);
  }

  TEST_CASE("a hash collision is a miss: the block's tokens are checked") {
    KvCacheManager kv(8, 4, true, colliding_hash);
    const auto a = iota_tokens(5, 1);
    REQUIRE(kv.allocate_slots(1, 5));
    kv.cache_full_blocks(1, a, 5);
    CHECK(kv.computed_blocks(2, a) == 4);  // the same tokens: a hit
    kv.free(2);
    const auto b = iota_tokens(5, 100);    // same hash, other tokens
    CHECK(kv.computed_blocks(3, b) == 0);
    CHECK_FALSE(kv.holds_blocks(3));
    CHECK(kv.num_used_blocks() == 2);  // sequence 1's blocks only: the rejected hit was released
  }

  TEST_CASE("allocate_slots is all or nothing") {
    KvCacheManager kv(4, 4, false);
    REQUIRE(kv.allocate_slots(1, 8));  // two blocks
    REQUIRE(kv.allocate_slots(2, 4));  // one block
    CHECK_FALSE(kv.allocate_slots(2, 12));  // needs two more, one is free
    CHECK(kv.block_table(2).size() == 1);
    CHECK(kv.num_used_blocks() == 3);
    CHECK_FALSE(kv.allocate_slots(3, 8));
    CHECK_FALSE(kv.holds_blocks(3));
    CHECK(kv.allocate_slots(2, 8));  // one more fits
    CHECK(kv.num_used_blocks() == 4);
  }

  TEST_CASE("free of an unknown sequence is a no-op; dropping the prefix cache forgets every prefix") {
    KvCacheManager kv(4, 4, true);
    kv.free(77);
    const auto prompt = iota_tokens(5, 1);
    REQUIRE(kv.allocate_slots(1, 5));
    kv.cache_full_blocks(1, prompt, 5);
    kv.drop_prefix_cache();
    CHECK(kv.computed_blocks(2, prompt) == 0);
    CHECK(kv.num_used_blocks() == 2);  // sequence 1 keeps its blocks
  }

  TEST_CASE("without prefix caching nothing is reused") {
    KvCacheManager kv(4, 4, false);
    const auto prompt = iota_tokens(9, 1);
    REQUIRE(kv.allocate_slots(1, 9));
    kv.cache_full_blocks(1, prompt, 9);
    CHECK(kv.computed_blocks(2, prompt) == 0);
  }
}
