// The KV block pool and the per-sequence block tables: allocation that fails cleanly, a free
// queue in release order, ref counts for sharing, and tables freed all at once.
#include <gtest/gtest.h>

#include "worker/engine/backend_factory.h"
#include "worker/engine/kv_block_pool.h"
#include "worker/engine/kv_cache_manager.h"
#include "worker/engine/sequence.h"

namespace hearth {
namespace {

TEST(KvBlockPool, AllocatesInOrderAndRefusesWhatItLacks) {
  KvBlockPool pool(4);
  EXPECT_EQ(pool.total(), 4);
  EXPECT_EQ(pool.free(), 4);
  std::vector<int32_t> got;
  ASSERT_TRUE(pool.allocate(3, got));
  EXPECT_EQ(got, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(pool.used(), 3);
  EXPECT_FALSE(pool.allocate(2, got));  // only one free: nothing taken
  EXPECT_EQ(got.size(), 3u);
  EXPECT_EQ(pool.free(), 1);
  EXPECT_TRUE(pool.allocate(0, got));
  EXPECT_THROW(KvBlockPool(0), std::runtime_error);
}

// A leased pool (issue 22): it may start empty, new blocks come before cached free ones, and it
// shrinks only over blocks nobody holds, evicting the cached ones there.
TEST(KvBlockPool, GrowsFreshBlocksFirstAndShrinksOnlyFreeOnes) {
  EXPECT_THROW(KvBlockPool(0, false), std::runtime_error);
  KvBlockPool pool(0, true);
  EXPECT_EQ(pool.total(), 0);
  std::vector<int32_t> got;
  EXPECT_FALSE(pool.allocate(1, got));
  pool.grow(2);
  ASSERT_TRUE(pool.allocate(2, got));
  pool.release(got[1]);  // block 1 free again, at the back
  pool.grow(2);          // blocks 2 and 3, at the front
  std::vector<int32_t> more;
  ASSERT_TRUE(pool.allocate(3, more));
  EXPECT_EQ(more, (std::vector<int32_t>{2, 3, 1}));
  EXPECT_FALSE(pool.shrink(1));  // blocks 1-3 are held
  EXPECT_EQ(pool.total(), 4);
  for (int32_t b : more) pool.release(b);
  EXPECT_TRUE(pool.shrink(1));
  EXPECT_EQ(pool.total(), 1);
  EXPECT_EQ(pool.free(), 0);  // block 0 is still held
  pool.release(0);
  std::vector<int32_t> last;
  ASSERT_TRUE(pool.allocate(1, last));
  EXPECT_EQ(last, (std::vector<int32_t>{0}));
}

TEST(KvCacheManager, ShrinkEvictsCachedBlocksPastTheCut) {
  KvCacheManager kv(0, 4, /*prefix_cache=*/true, /*growable=*/true);
  kv.grow(4);
  Sequence seq;
  seq.id = 1;
  seq.tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  ASSERT_TRUE(kv.allocate(1, 9));
  seq.computed = 9;
  kv.cache_full_blocks(seq, 0, 9);
  EXPECT_EQ(kv.cached_blocks(), 2);
  EXPECT_FALSE(kv.shrink(1));  // held
  kv.free(1);
  EXPECT_TRUE(kv.shrink(1));
  EXPECT_EQ(kv.pool().total(), 1);
  EXPECT_EQ(kv.cached_blocks(), 1);  // block 0's entry stays; block 1's is evicted
  EXPECT_EQ(kv.evicted_blocks(), 1u);
}

TEST(KvBlockPool, ReleasedBlocksAreReusedLeastRecentlyReleasedFirst) {
  KvBlockPool pool(4);
  std::vector<int32_t> got;
  ASSERT_TRUE(pool.allocate(4, got));
  pool.release(2);
  pool.release(0);
  std::vector<int32_t> again;
  ASSERT_TRUE(pool.allocate(2, again));
  EXPECT_EQ(again, (std::vector<int32_t>{2, 0}));
}

TEST(KvBlockPool, SharedBlocksReturnWithTheirLastOwner) {
  KvBlockPool pool(2);
  std::vector<int32_t> got;
  ASSERT_TRUE(pool.allocate(1, got));
  pool.retain(got[0]);
  EXPECT_EQ(pool.ref_count(got[0]), 2);
  pool.release(got[0]);
  EXPECT_EQ(pool.used(), 1);
  pool.release(got[0]);
  EXPECT_EQ(pool.used(), 0);
  EXPECT_THROW(pool.release(got[0]), std::logic_error);  // released twice
  EXPECT_THROW(pool.retain(got[0]), std::logic_error);   // free: nothing to share
  EXPECT_THROW(pool.release(7), std::logic_error);       // outside the pool
}

TEST(KvCacheManager, TablesGrowByWholeBlocksAndFreeAtOnce) {
  KvCacheManager kv(5, 4);
  EXPECT_EQ(kv.blocks_for(0), 0);
  EXPECT_EQ(kv.blocks_for(1), 1);
  EXPECT_EQ(kv.blocks_for(4), 1);
  EXPECT_EQ(kv.blocks_for(5), 2);
  ASSERT_TRUE(kv.allocate(1, 3));
  EXPECT_EQ(kv.block_table(1).size(), 1u);
  ASSERT_TRUE(kv.allocate(1, 4));  // still one block
  EXPECT_EQ(kv.block_table(1).size(), 1u);
  ASSERT_TRUE(kv.allocate(1, 9));
  EXPECT_EQ(kv.block_table(1).size(), 3u);
  EXPECT_EQ(kv.blocks_needed(2, 12), 3);
  EXPECT_FALSE(kv.allocate(2, 12));  // 2 free, 3 needed: nothing changes
  EXPECT_TRUE(kv.block_table(2).empty());
  EXPECT_EQ(kv.pool().free(), 2);
  ASSERT_TRUE(kv.allocate(2, 8));
  EXPECT_EQ(kv.pool().free(), 0);
  kv.free(1);
  EXPECT_EQ(kv.pool().free(), 3);
  EXPECT_TRUE(kv.block_table(1).empty());
  kv.free(1);  // nothing left to free
  kv.free(2);
  EXPECT_EQ(kv.pool().used(), 0);
}

TEST(KvPoolOptions, ResolveToBlocks) {
  EngineOptions o;
  const int64_t per_token = 1024;
  o.kv_pool_tokens = 100;
  o.kv_block_size = 16;
  EXPECT_EQ(resolve_kv_pool(o, 512, per_token).num_blocks, 7);  // rounded up
  o.kv_pool_tokens = 0;
  o.kv_pool_gb = 1.0 / 1024;  // 1 MiB: 1024 tokens
  EXPECT_EQ(resolve_kv_pool(o, 512, per_token).num_blocks, 64);
  o.kv_pool_tokens = 100;
  EXPECT_THROW(resolve_kv_pool(o, 512, per_token), std::runtime_error);  // both set
  o.kv_pool_tokens = 0;
  o.kv_pool_gb = 1e-9;
  EXPECT_THROW(resolve_kv_pool(o, 512, per_token), std::runtime_error);  // under one block
  // Default: max_running contexts, capped at 1 GiB, never under one context.
  o.kv_pool_gb = 0;
  o.max_running = 4;
  EXPECT_EQ(resolve_kv_pool(o, 512, per_token).num_blocks, 4 * 512 / 16);
  o.max_running = 256;
  EXPECT_EQ(resolve_kv_pool(o, 8192, per_token).num_blocks, (1 << 20) / 16);  // 1 GiB / 1 KiB
  EXPECT_EQ(resolve_kv_pool(o, 4096, int64_t(1) << 30).num_blocks, 4096 / 16);
}

// The GPU's pool comes from the same policy, given the device's free memory.
TEST(KvPoolOptions, DeviceShareOfFreeMemory) {
  EngineOptions o;
  const int64_t per_token = 1024;
  o.kv_block_size = 16;
  o.max_running = 256;
  const size_t free = size_t(10) << 20;  // 10 MiB: 10240 positions
  // Default share 0.9, whole blocks: 9216 positions.
  EXPECT_EQ(resolve_kv_pool(o, 512, per_token, free).num_blocks, 9216 / 16);
  o.kv_pool_fraction = 0.5;
  EXPECT_EQ(resolve_kv_pool(o, 512, per_token, free).num_blocks, 5120 / 16);
  // At most max_running full contexts.
  o.max_running = 2;
  EXPECT_EQ(resolve_kv_pool(o, 512, per_token, free).num_blocks, 2 * 512 / 16);
  // Less than one context fits: refused, naming the free memory.
  EXPECT_THROW(resolve_kv_pool(o, 8192, per_token, free), std::runtime_error);
  // Explicit sizes win over the free memory; the CPU refuses a fraction.
  o.kv_pool_fraction = 0;
  o.kv_pool_tokens = 100;
  EXPECT_EQ(resolve_kv_pool(o, 512, per_token, free).num_blocks, 7);
  o.kv_pool_tokens = 0;
  o.kv_pool_fraction = 0.5;
  EXPECT_THROW(resolve_kv_pool(o, 512, per_token), std::runtime_error);
}

}  // namespace
}  // namespace hearth
