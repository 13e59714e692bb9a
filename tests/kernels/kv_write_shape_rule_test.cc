// How paged_kv_write sizes its blocks (kernels/kv_write_shape_rule.h), on an H100's 132 SMs:
// which heads-per-block a shape allows, and which one each step size gets.
#include "kernels/kv_write_shape_rule.h"

#include <gtest/gtest.h>

namespace hearth::kernels::kv_write_shape {
namespace {

constexpr int64_t kH100Sms = 132;

TEST(KvWriteShapeRule, AllowsOnlyBlocksOfOneKindOfWholeWarpHeads) {
  // The 8B (32 q, 8 kv heads, head_dim 128: 64 threads a head): 1, 2, 4 and 8 heads.
  for (int heads : {1, 2, 4, 8}) EXPECT_TRUE(allowed(heads, 32, 8, 128)) << heads;
  // 3 and 16 would put q and k heads (or k and v) in one block.
  for (int heads : {0, -1, 3, 16}) EXPECT_FALSE(allowed(heads, 32, 8, 128)) << heads;
  // head_dim 96: 48 threads a head; two heads would share a warp, one alone is fine.
  EXPECT_TRUE(allowed(1, 32, 8, 96));
  EXPECT_FALSE(allowed(2, 32, 8, 96));
  // head_dim 1,024: 512 threads a head; two fill a block, four would overflow it.
  EXPECT_TRUE(allowed(2, 32, 8, 1024));
  EXPECT_FALSE(allowed(4, 32, 8, 1024));
  // 14 q heads and 2 kv heads (Qwen2-0.5B): at most 2.
  EXPECT_TRUE(allowed(2, 14, 2, 64));
  EXPECT_FALSE(allowed(7, 14, 2, 64));
}

TEST(KvWriteShapeRule, AutomaticCutsBlocksOnlyWhileTheGridStillCoversTheSms) {
  // The 8B: 48 heads a token. One token keeps a head a block (48 blocks < 132 SMs; 4 heads
  // would leave 12 blocks); from 11 tokens (132 blocks of 4 heads) blocks hold 4 heads,
  // 256 threads: 8 an SM.
  EXPECT_EQ(automatic(1, 32, 8, 128, kH100Sms), 1);
  EXPECT_EQ(automatic(3, 32, 8, 128, kH100Sms), 1);   // 144 blocks of 1; 72 of 2 too few
  EXPECT_EQ(automatic(6, 32, 8, 128, kH100Sms), 2);   // 144 blocks of 2
  EXPECT_EQ(automatic(11, 32, 8, 128, kH100Sms), 4);  // 132 blocks of 4
  EXPECT_EQ(automatic(64, 32, 8, 128, kH100Sms), 4);
  EXPECT_EQ(automatic(256, 32, 8, 128, kH100Sms), 4);  // 3,072 blocks instead of 12,288
  // head_dim 64 (32 threads a head): up to 8 heads, 256 threads.
  EXPECT_EQ(automatic(256, 32, 8, 64, kH100Sms), 8);
  // head_dim 256 (128 threads a head): 2 heads, 256 threads.
  EXPECT_EQ(automatic(256, 32, 8, 256, kH100Sms), 2);
  // Heads that are not whole warps stay one a block.
  EXPECT_EQ(automatic(256, 32, 8, 96, kH100Sms), 1);
  EXPECT_EQ(automatic(256, 4, 2, 16, kH100Sms), 1);
  // Few kv heads bound the group: 14 and 2 heads allow 2 at most.
  EXPECT_EQ(automatic(256, 14, 2, 64, kH100Sms), 2);
}

}  // namespace
}  // namespace hearth::kernels::kv_write_shape
