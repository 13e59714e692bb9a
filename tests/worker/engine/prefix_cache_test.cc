// Prefix caching's parts alone: the hash chain and its index, the pool's reuse of a free block
// from the middle of its queue, the cache domain (what keeps engines that compute different
// bits apart), and the KV cache manager finding, registering and evicting cached blocks.
#include <gtest/gtest.h>

#include <memory>
#include <numeric>

#include "worker/engine/cache_domain.h"
#include "worker/engine/kv_block_pool.h"
#include "worker/engine/kv_cache_manager.h"
#include "worker/engine/prefix_cache.h"
#include "worker/engine/sequence.h"

namespace hearth {
namespace {

std::vector<int32_t> iota(int n, int first) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

TEST(PrefixCacheKeys, ChainOverParentTokensAndSalt) {
  const BlockKey domain = cache_domain_key({}, "cpu", "model");
  const BlockKey root = chain_root_key(domain, "");
  const std::vector<int32_t> a = iota(4, 1), b = iota(4, 2);
  EXPECT_EQ(chain_block_key(root, a), chain_block_key(root, a));
  EXPECT_NE(chain_block_key(root, a), chain_block_key(root, b));
  // The same tokens after a different parent, or under another salt, are another block.
  EXPECT_NE(chain_block_key(chain_block_key(root, a), a), chain_block_key(root, a));
  EXPECT_NE(chain_root_key(domain, "tenant-a"), root);
  EXPECT_NE(chain_block_key(chain_root_key(domain, "tenant-a"), a), chain_block_key(root, a));
}

TEST(PrefixCacheKeys, TheDomainCoversModelBackendAndNumericsOptionsOnly) {
  const EngineOptions base;
  const BlockKey d = cache_domain_key(base, "cuda", "served:abc");
  EXPECT_EQ(cache_domain_key(base, "cuda", "served:abc"), d);
  EXPECT_NE(cache_domain_key(base, "cuda", "served:abd"), d);  // another model
  EXPECT_NE(cache_domain_key(base, "cpu", "served:abc"), d);   // fp32 vs bf16
  auto with = [&](auto change) {
    EngineOptions o = base;
    change(o);
    return cache_domain_key(o, "cuda", "served:abc");
  };
  EXPECT_NE(with([](EngineOptions& o) { o.kv_cache_dtype = KvCacheDtype::F16; }), d);
  EXPECT_NE(with([](EngineOptions& o) { o.cuda_engine = CudaEngineKind::Single; }), d);
  EXPECT_NE(with([](EngineOptions& o) { o.decode_gemv = DecodeGemv::Cublas; }), d);
  EXPECT_NE(with([](EngineOptions& o) { o.weights_layout = WeightsLayout::Packed; }), d);
  EXPECT_NE(with([](EngineOptions& o) { o.batch_invariant = false; }), d);
  // Options that change no bits leave the domain alone, so such engines could share.
  EXPECT_EQ(with([](EngineOptions& o) { o.matmul_tiling = MatmulTiling::Tuned; }), d);
  EXPECT_EQ(with([](EngineOptions& o) { o.cuda_graphs = false; }), d);
  EXPECT_EQ(with([](EngineOptions& o) { o.max_batch_tokens = 64; }), d);
  EXPECT_EQ(with([](EngineOptions& o) { o.max_running = 3; }), d);
}

TEST(PrefixCacheIndex, FindsOnlyTheSameParentAndTokens) {
  PrefixCache cache;
  const BlockKey parent{1, 2}, key{3, 4};
  const std::vector<int32_t> tokens = iota(4, 10);
  EXPECT_EQ(cache.find(key, parent, tokens), -1);
  EXPECT_TRUE(cache.insert(key, parent, tokens, 7));
  EXPECT_EQ(cache.find(key, parent, tokens), 7);
  // A key that matched by accident (a collision) with other tokens or parent is a miss.
  EXPECT_EQ(cache.find(key, parent, iota(4, 11)), -1);
  EXPECT_EQ(cache.find(key, BlockKey{1, 3}, tokens), -1);
  EXPECT_FALSE(cache.insert(key, parent, tokens, 8));             // the key is taken: first stays
  EXPECT_FALSE(cache.insert(BlockKey{5, 6}, parent, tokens, 7));  // block 7 is registered
  EXPECT_EQ(cache.size(), 1);
  EXPECT_TRUE(cache.erase(7));
  EXPECT_FALSE(cache.erase(7));
  EXPECT_EQ(cache.find(key, parent, tokens), -1);
  EXPECT_TRUE(cache.insert(key, parent, tokens, 8));  // the key is free again
}

TEST(KvBlockPoolReuse, TakesAFreeBlockOutOfTheMiddleOfTheQueue) {
  KvBlockPool pool(4);
  std::vector<int32_t> got;
  ASSERT_TRUE(pool.allocate(4, got));
  for (int32_t b : {3, 1, 2, 0}) pool.release(b);  // queue: 3 1 2 0
  pool.reuse(2);                                   // a hit on a block nobody holds
  EXPECT_EQ(pool.ref_count(2), 1);
  EXPECT_EQ(pool.free(), 3);
  pool.reuse(2);  // and on one somebody holds
  EXPECT_EQ(pool.ref_count(2), 2);
  std::vector<int32_t> again;
  ASSERT_TRUE(pool.allocate(3, again));
  EXPECT_EQ(again, (std::vector<int32_t>{3, 1, 0}));  // the queue closed over the gap
  EXPECT_FALSE(pool.allocate(1, again));
  for (int32_t b : {3, 1, 0, 2, 2}) pool.release(b);
  EXPECT_EQ(pool.free(), 4);
  for (int32_t b = 0; b < 4; ++b) EXPECT_EQ(pool.ref_count(b), 0);
}

// Sequences for a KvCacheManager with caching on, as the engine makes them.
struct Cached {
  explicit Cached(int blocks, int block_size = 4, bool on = true) : kv(blocks, block_size, on) {}
  Sequence& add(std::vector<int32_t> tokens, std::string_view salt = "",
                std::string_view model = "m") {
    auto s = std::make_unique<Sequence>();
    s->id = seqs.size() + 1;
    s->tokens = std::move(tokens);
    s->prompt_tokens = int(s->tokens.size());
    s->chain_root = chain_root_key(cache_domain_key({}, "cpu", model), salt);
    seqs.push_back(std::move(s));
    return *seqs.back();
  }
  // Finds what it can, then "computes" the rest of `seq` (all but its last token).
  int run(Sequence& seq) {
    const int found = kv.reuse_cached_blocks(seq);
    const int to = int(seq.tokens.size()) - 1;
    EXPECT_TRUE(kv.allocate(seq.id, to));
    kv.cache_full_blocks(seq, seq.computed, to);
    seq.computed = to;
    return found;
  }
  KvCacheManager kv;
  std::vector<std::unique_ptr<Sequence>> seqs;
};

TEST(KvCacheManagerPrefix, FindsWholeBlocksButNeverTheLastToken) {
  Cached c(16);
  Sequence& a = c.add(iota(13, 1));
  EXPECT_EQ(c.run(a), 0);
  EXPECT_EQ(c.kv.cached_blocks(), 3);  // 12 computed positions: three full blocks
  // The same prompt: the block holding its last token (position 12) is never taken.
  Sequence& b = c.add(iota(13, 1));
  EXPECT_EQ(c.run(b), 12);
  Sequence& b2 = c.add(iota(12, 1));  // 12 tokens: the last is in block 2, so two blocks
  EXPECT_EQ(c.run(b2), 8);
  EXPECT_EQ(c.kv.block_table(b2.id)[0], c.kv.block_table(a.id)[0]);  // shared, not copied
  EXPECT_EQ(c.kv.pool().ref_count(c.kv.block_table(a.id)[0]), 3);
  // A prompt that diverges inside block 1 shares block 0 only.
  std::vector<int32_t> other = iota(13, 1);
  other[5] = 99;
  EXPECT_EQ(c.run(c.add(other)), 4);
  for (auto& s : c.seqs) c.kv.free(s->id);
  EXPECT_EQ(c.kv.pool().free(), 16);
  for (int32_t blk = 0; blk < 16; ++blk) EXPECT_EQ(c.kv.pool().ref_count(blk), 0);
  EXPECT_GT(c.kv.cached_blocks(), 0);  // free, yet still findable
  EXPECT_EQ(c.run(c.add(iota(13, 1))), 12);
}

TEST(KvCacheManagerPrefix, AnotherSaltOrModelNeverHits) {
  Cached c(16);
  EXPECT_EQ(c.run(c.add(iota(13, 1), "tenant-a")), 0);
  EXPECT_EQ(c.run(c.add(iota(13, 1), "tenant-b")), 0);
  EXPECT_EQ(c.run(c.add(iota(13, 1), "")), 0);
  EXPECT_EQ(c.run(c.add(iota(13, 1), "tenant-a", "another model")), 0);
  EXPECT_EQ(c.run(c.add(iota(13, 1), "tenant-a")), 12);
}

TEST(KvCacheManagerPrefix, APartlyComputedBlockIsSwappedForTheCachedOne) {
  Cached c(16);
  Sequence& a = c.add(iota(13, 1));
  c.run(a);
  Sequence& b = c.add(iota(13, 1));
  ASSERT_TRUE(c.kv.allocate(b.id, 6));  // b computed 6 tokens on its own: block 1 half full
  b.computed = 6;
  const int32_t own = c.kv.block_table(b.id)[1];
  EXPECT_EQ(c.kv.reuse_cached_blocks(b), 6);  // up to position 12
  EXPECT_EQ(b.computed, 12);
  EXPECT_EQ(c.kv.block_table(b.id)[1], c.kv.block_table(a.id)[1]);
  EXPECT_EQ(c.kv.pool().ref_count(own), 0);  // its own partial block went back
}

TEST(KvCacheManagerPrefix, AllocationEvictsLeastRecentlyReleasedCachedBlocksFirst) {
  Cached c(6);
  Sequence& a = c.add(iota(17, 1));  // 16 computed: four full blocks
  c.run(a);
  c.kv.free(a.id);  // released tail first: block 3 is the first to go
  EXPECT_EQ(c.kv.cached_blocks(), 4);
  Sequence& other = c.add(iota(13, 50));  // needs three blocks: two never used, then one cached
  c.run(other);
  EXPECT_EQ(c.kv.evicted_blocks(), 1u);
  c.kv.free(other.id);
  // a's first three blocks survive; the fourth (positions 12-15) was evicted.
  EXPECT_EQ(c.run(c.add(iota(17, 1))), 12);
}

TEST(KvCacheManagerPrefix, DroppingForgetsOnlyUnheldBlocks) {
  Cached c(8);
  Sequence& a = c.add(iota(9, 1));
  c.run(a);
  Sequence& b = c.add(iota(9, 100));
  c.run(b);
  c.kv.free(a.id);
  c.kv.drop_unused_cached_blocks();
  EXPECT_EQ(c.kv.cached_blocks(), 2);  // b's, still held
  c.kv.free(b.id);
  c.kv.drop_unused_cached_blocks();
  EXPECT_EQ(c.kv.cached_blocks(), 0);
  EXPECT_EQ(c.kv.pool().free(), 8);
  EXPECT_EQ(c.run(c.add(iota(9, 1))), 0);
}

TEST(KvCacheManagerPrefix, OffMeansNoLookupAndNoRegistration) {
  Cached c(16, 4, /*on=*/false);
  c.run(c.add(iota(13, 1)));
  EXPECT_EQ(c.kv.cached_blocks(), 0);
  EXPECT_EQ(c.run(c.add(iota(13, 1))), 0);
}

}  // namespace
}  // namespace hearth
