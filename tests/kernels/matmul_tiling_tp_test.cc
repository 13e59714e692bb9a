// The decode tiling rule (kernels/matmul_tiling.h) on tensor-parallel shards: a shard whose
// 32-row tiles leave half the SMs of an H100 (132) or more idle takes 24-row tiles, and every
// TP=1 shape of the 8B keeps its tile.
#include <gtest/gtest.h>

#include "kernels/matmul_tiling.h"
#include "tests/kernels/h100_launch_shape.h"

namespace hearth::kernels::tiling {
namespace {

// The 8B (hidden 4,096, 32 q / 8 kv heads of 128, intermediate 14,336) sharded over `tp`.
struct Shards {
  LaunchShape qkv, o, gate_up, down;
};
Shards llama(int m, int tp, int hidden, int q_heads, int kv_heads, int intermediate) {
  const int q = q_heads * 128 / tp, kv = kv_heads * 128 / tp;
  return {shape(m, {q, kv, kv}, hidden), shape(m, {hidden, 0, 0}, q),
          shape(m, {intermediate / tp, 0, 0}, hidden, true),
          shape(m, {hidden, 0, 0}, intermediate / tp)};
}
Shards llama8b(int m, int tp) {
  return llama(m, tp, 4096, 32, 8, 14336);
}
Shards llama70b(int m, int tp) {
  return llama(m, tp, 8192, 64, 8, 28672);
}

TEST(MatmulTilingTp, TheEightBAtTpOneKeepsItsTiles) {
  for (int m = 1; m <= 16; ++m) {
    const Shards s = llama8b(m, 1);
    EXPECT_EQ(decode_tile(s.qkv), DecodeTile::M16N48DeepFourBoxes);
    EXPECT_EQ(decode_tile(s.o), DecodeTile::M16N32DeepFourBoxes);
    EXPECT_EQ(decode_tile(s.gate_up), DecodeTile::M16N112);
    EXPECT_EQ(decode_tile(s.down), DecodeTile::M16N32DeepFourBoxes);
    EXPECT_EQ(decode_tile(shape(m, {128256, 0, 0}, 4096)), DecodeTile::M16N64);
  }
}

TEST(MatmulTilingTp, SeventeenToSixtyFourRowsTakeFourBoxTilesWhereTheyFitOneWave) {
  for (int m : {17, 24, 32, 33, 40, 48, 49, 64}) {
    const Shards s = llama8b(m, 1);
    const bool rows32 = m <= 32, rows48 = !rows32 && m <= 48;
    // o and down: 128 tiles of 32; q/k/v: 192 of 32, 130 of 48. 33-48 rows take 48-row tiles.
    const DecodeTile one_wave = rows32   ? DecodeTile::M32N32DeepFourBoxes
                                : rows48 ? DecodeTile::M48N32DeepFourBoxes
                                         : DecodeTile::M64N32DeepFourBoxes;
    EXPECT_EQ(decode_tile(s.o), one_wave);
    EXPECT_EQ(decode_tile(s.down), one_wave);
    EXPECT_EQ(decode_tile(s.qkv), rows32   ? DecodeTile::M32N48DeepFourBoxes
                                  : rows48 ? DecodeTile::M48N48DeepFourBoxes
                                           : DecodeTile::M64N48DeepFourBoxes);
    // gate/up is wide: the 16-row rule's 112-row streaming tiles; the head keeps 32 / 64.
    EXPECT_EQ(decode_tile(s.gate_up), rows32 ? DecodeTile::M32N112 : DecodeTile::M64N112);
    EXPECT_EQ(decode_tile(shape(m, {128256, 0, 0}, 4096)),
              rows32 ? DecodeTile::M32N32 : DecodeTile::M64N64);
  }
  // K not in whole four-box stages: the one-box deep tile.
  EXPECT_EQ(decode_tile(shape(32, {4096, 0, 0}, 4096 + 64)), DecodeTile::M32N32Deep);
  EXPECT_EQ(decode_tile(shape(65, {4096, 0, 0}, 4096)), DecodeTile::Large);
}

TEST(MatmulTilingTp, EightBShardsFillTheSms) {
  // TP=2 q/k/v (2,048 + 512 + 512): 96 tiles of 32 cover most SMs (measured: 32 beats 24).
  const Shards tp2 = llama8b(1, 2);
  EXPECT_EQ(tp2.qkv.column_tiles(32), 96);
  EXPECT_EQ(decode_tile(tp2.qkv), DecodeTile::M16N32DeepFourBoxes);
  EXPECT_EQ(decode_tile(llama8b(16, 2).qkv), DecodeTile::M16N32DeepFourBoxes);
  // o and down keep 4,096 columns: 128 tiles of 32, 171 of 24.
  EXPECT_EQ(decode_tile(tp2.o), DecodeTile::M16N32DeepFourBoxes);
  EXPECT_EQ(decode_tile(tp2.down), DecodeTile::M16N32DeepFourBoxes);
  EXPECT_EQ(decode_tile(tp2.gate_up), DecodeTile::M16N112);

  // TP=4 q/k/v (1,024 + 256 + 256): 48 tiles of 32 leave 84 SMs idle; 65 of 24.
  const Shards tp4 = llama8b(1, 4);
  EXPECT_EQ(tp4.qkv.column_tiles(32), 48);
  EXPECT_EQ(tp4.qkv.column_tiles(24), 43 + 11 + 11);
  EXPECT_EQ(decode_tile(tp4.qkv), DecodeTile::M16N24DeepFourBoxes);
  EXPECT_EQ(decode_tile(llama8b(16, 4).qkv), DecodeTile::M16N24DeepFourBoxes);
  EXPECT_EQ(decode_tile(tp4.o), DecodeTile::M16N32DeepFourBoxes);
  EXPECT_EQ(decode_tile(tp4.down), DecodeTile::M16N32DeepFourBoxes);
  // gate/up (7,168 weight rows): 224 SwiGLU tiles of 32 are more than one wave: two blocks an
  // SM, as before.
  EXPECT_EQ(tp4.gate_up.column_tiles(32), 224);
  EXPECT_EQ(decode_tile(tp4.gate_up), DecodeTile::M16N32);
}

TEST(MatmulTilingTp, SeventyBShardsAtTpFour) {
  // q/k/v (2,048 + 256 + 256): 80 tiles of 32 cover most SMs: kept.
  const Shards tp4 = llama70b(1, 4);
  EXPECT_EQ(tp4.qkv.column_tiles(32), 80);
  EXPECT_EQ(decode_tile(tp4.qkv), DecodeTile::M16N32DeepFourBoxes);
  // o and down (8,192 columns: 256 tiles of 32) and gate/up (14,336 weight rows) are wide.
  EXPECT_EQ(decode_tile(tp4.o), DecodeTile::M16N32);
  EXPECT_EQ(decode_tile(tp4.down), DecodeTile::M16N32);
  EXPECT_EQ(decode_tile(tp4.gate_up), DecodeTile::M16N112);
  EXPECT_EQ(decode_tile(llama70b(64, 4).gate_up), DecodeTile::M64N112);
  EXPECT_EQ(decode_tile(llama70b(64, 4).down), DecodeTile::M64N64Deep);
}

TEST(MatmulTilingTp, NarrowTilesNeedFourBoxStagesAndWholeSwiGluHalves) {
  // A tiny width takes 24 rows (never 16 or 8: slower in the measurement above).
  EXPECT_EQ(decode_tile(shape(1, {64, 0, 0}, 512)), DecodeTile::M16N24DeepFourBoxes);
  // K not in whole four-box stages: the one-box deep tile, as before.
  EXPECT_EQ(decode_tile(shape(1, {2048, 512, 512}, 4096 + 64)), DecodeTile::M16N32Deep);
  // More than 16 rows: the 32-row four-box tiles (24 rows only at 1-16).
  EXPECT_EQ(decode_tile(shape(17, {2048, 512, 512}, 4096)), DecodeTile::M32N32DeepFourBoxes);
  // SwiGLU: 24 weight rows would split an 8-column group of gate or up: 32 stays.
  EXPECT_EQ(decode_tile(shape(1, {64, 0, 0}, 512, true)), DecodeTile::M16N32DeepFourBoxes);
  EXPECT_EQ(decode_tile(shape(1, {1024, 0, 0}, 512, true)), DecodeTile::M16N32DeepFourBoxes);
  // Exactly one wave of 32 leaves no SM idle.
  EXPECT_EQ(decode_tile(shape(1, {132 * 32, 0, 0}, 512)), DecodeTile::M16N32DeepFourBoxes);
}

}  // namespace
}  // namespace hearth::kernels::tiling
