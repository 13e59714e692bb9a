// The tiling rule both wgmma matmuls share (kernels/matmul_tiling.h), on the 8B's shapes and an
// H100's 132 SMs: which tile each decode and prompt launch gets, and why.
#include "kernels/matmul_tiling.h"

#include <gtest/gtest.h>

#include "tests/kernels/h100_launch_shape.h"

namespace hearth::kernels::tiling {
namespace {

TEST(MatmulTiling, ColumnTilesAreCountedPerWeight) {
  // q, k and v of the 8B: 4,096 / 48 -> 86 tiles (the last partial), 1,024 / 48 -> 22 each.
  const LaunchShape qkv = shape(1, {4096, 1024, 1024}, 4096);
  EXPECT_EQ(qkv.column_tiles(48), 86 + 22 + 22);
  EXPECT_EQ(qkv.column_tiles(32), 192);
  EXPECT_EQ(qkv.weight_rows(), 6144);
  // SwiGLU: a tile of 64 weight rows holds 32 gate and 32 up rows.
  const LaunchShape gate_up = shape(1, {14336, 0, 0}, 4096, true);
  EXPECT_EQ(gate_up.column_tiles(64), 448);
  EXPECT_EQ(gate_up.weight_rows(), 28672);
}

TEST(MatmulTiling, OneWaveDecodeShapesTakeDeepFourBoxTiles) {
  // o and down: 4,096 columns, 128 tiles of 32: one wave.
  EXPECT_EQ(decode_tile(shape(1, {4096, 0, 0}, 4096)), DecodeTile::M16N32DeepFourBoxes);
  EXPECT_EQ(decode_tile(shape(16, {4096, 0, 0}, 14336)), DecodeTile::M16N32DeepFourBoxes);
  // q, k and v: 192 tiles of 32 need a second wave, 130 of 48 do not.
  EXPECT_EQ(decode_tile(shape(1, {4096, 1024, 1024}, 4096)), DecodeTile::M16N48DeepFourBoxes);
  // With K not in whole four-box stages, the one-box deep tile.
  EXPECT_EQ(decode_tile(shape(1, {4096, 0, 0}, 4096 + 64)), DecodeTile::M16N32Deep);
  // The LM head (128,256 columns) is wider than one wave even at 48: two 64-row tiles an SM.
  EXPECT_EQ(decode_tile(shape(8, {128256, 0, 0}, 4096)), DecodeTile::M16N64);
}

TEST(MatmulTiling, TheBusiestSmSetsTheDecodeTileOfWideShapes) {
  // 8B gate/up, 28,672 weight rows: 448 tiles of 64 on 264 blocks leave SM 0 four tiles (256
  // rows; the mean is 217); 256 tiles of 112 leave it two (224).
  EXPECT_EQ(busiest_sm_rows(448, 64, 2, kH100Sms), 256);
  EXPECT_EQ(busiest_sm_rows(256, 112, 2, kH100Sms), 224);
  EXPECT_EQ(decode_tile(shape(1, {14336, 0, 0}, 4096, true)), DecodeTile::M16N112);
  EXPECT_EQ(decode_tile(shape(16, {14336, 0, 0}, 4096, true)), DecodeTile::M16N112);
  // Its TP=2 shard (14,336 rows): 128 tiles of 112, one an SM, instead of 448 of 32.
  EXPECT_EQ(decode_tile(shape(1, {7168, 0, 0}, 4096, true)), DecodeTile::M16N112);
  // TP=4 (7,168 rows): 224 tiles of 32 spread better than 64 of 112.
  EXPECT_EQ(busiest_sm_rows(224, 32, 2, kH100Sms), 64);
  EXPECT_EQ(decode_tile(shape(1, {3584, 0, 0}, 4096, true)), DecodeTile::M16N32);
  // Fewer tiles than blocks: one each, SM 0 holds two.
  EXPECT_EQ(busiest_sm_rows(200, 32, 2, kH100Sms), 64);
  EXPECT_EQ(busiest_sm_rows(100, 32, 2, kH100Sms), 32);
}

TEST(MatmulTiling, LargerDecodeStepsAndPromptsTakeTheirOwnTiles) {
  // Four K boxes a stage where K allows.
  EXPECT_EQ(decode_tile(shape(32, {4096, 0, 0}, 4096)), DecodeTile::M32N32DeepFourBoxes);
  EXPECT_EQ(decode_tile(shape(32, {4096, 1024, 1024}, 4096)), DecodeTile::M32N48DeepFourBoxes);
  EXPECT_EQ(decode_tile(shape(33, {4096, 0, 0}, 4096)), DecodeTile::M48N32DeepFourBoxes);
  EXPECT_EQ(decode_tile(shape(48, {4096, 1024, 1024}, 4096)), DecodeTile::M48N48DeepFourBoxes);
  EXPECT_EQ(decode_tile(shape(49, {4096, 0, 0}, 4096)), DecodeTile::M64N32DeepFourBoxes);
  EXPECT_EQ(decode_tile(shape(64, {4096, 0, 0}, 4096)), DecodeTile::M64N32DeepFourBoxes);
  // gate/up streams 112-row tiles two blocks an SM, as at 16 rows.
  EXPECT_EQ(decode_tile(shape(64, {14336, 0, 0}, 4096, true)), DecodeTile::M64N112);
  EXPECT_EQ(decode_tile(shape(17, {14336, 0, 0}, 4096, true)), DecodeTile::M32N112);
  EXPECT_EQ(decode_tile(shape(65, {4096, 0, 0}, 4096)), DecodeTile::Large);
}

TEST(MatmulTiling, PromptsTakeTheFewestWeightedRounds) {
  enum class Tiles { Small, Big };
  // A small tile at half the rate against a big one at full rate.
  static constexpr Candidate<Tiles> kCandidates[] = {{Tiles::Small, 64, 64, 2, 0.5},
                                                     {Tiles::Big, 128, 256, 1, 1.0}};
  // 2,048 rows x 14,336 columns: 16 x 56 = 896 big tiles (7 rounds) beat 32 x 224 small ones.
  EXPECT_EQ(fewest_rounds(shape(2048, {14336, 0, 0}, 4096), kCandidates), Tiles::Big);
  // 128 rows x 4,096: 16 big tiles leave most SMs idle; 128 small ones fit one round.
  EXPECT_EQ(fewest_rounds(shape(128, {4096, 0, 0}, 4096), kCandidates), Tiles::Small);
}

// A cluster's blocks take consecutive row tiles, so a launch pays for whole clusters: 384 rows of
// the 8B's gate/up are three 128-row tiles, four as 2-block clusters (512 units: four rounds
// against three). At 2,048 rows both are 14 rounds and the cluster's rate decides. It sums K in
// one chain, so a launch whose K is halved never weighs it (its one-block twin runs instead).
TEST(MatmulTiling, ClustersArePaidForWholeAndNotWeighedWithKHalves) {
  enum class Tiles { Big128x256, Cluster2x128x256 };
  static constexpr Candidate<Tiles> kCandidates[] = {
      {Tiles::Big128x256, 128, 256, 1, 1.0}, {Tiles::Cluster2x128x256, 128, 256, 1, 1.04, 2}};
  LaunchShape gate_up = shape(384, {14336, 0, 0}, 4096, true);
  EXPECT_DOUBLE_EQ(rounds_cost(gate_up, kCandidates[1], 1), 4 * 128 * 256 / 1.04);
  EXPECT_DOUBLE_EQ(rounds_cost(gate_up, kCandidates[0], 1), 3 * 128 * 256);
  EXPECT_EQ(fewest_rounds(gate_up, kCandidates), Tiles::Big128x256);
  gate_up.m = 2048;
  EXPECT_EQ(fewest_rounds(gate_up, kCandidates), Tiles::Cluster2x128x256);
  LaunchShape down = shape(2048, {4096, 0, 0}, 14336);
  down.k_halves = 2;
  EXPECT_EQ(fewest_rounds(down, kCandidates), Tiles::Big128x256);
  EXPECT_EQ(units_per_tile(down, kCandidates[1]), 1);
}

// K summed in two fixed halves (the 8B's down): where a launch has few tiles, each tile's halves
// go on two blocks, twice the units filling SMs whole-K tiles leave idle (128 rows: 64 128x64
// tiles become 128 units); where the tiles already fill the SMs, one block sums both halves and
// spares the exchange (2,048 rows: 256 128x256 tiles, two rounds either way).
TEST(MatmulTiling, KHalvesGoOnTwoBlocksWhereTilesLeaveSmsIdle) {
  enum class Tiles { Deep64x64, Wide128x64, Big128x256 };
  static constexpr Candidate<Tiles> kCandidates[] = {{Tiles::Deep64x64, 64, 64, 1, 0.4},
                                                     {Tiles::Wide128x64, 128, 64, 1, 0.75},
                                                     {Tiles::Big128x256, 128, 256, 1, 1.0}};
  LaunchShape down = shape(128, {4096, 0, 0}, 14336);
  EXPECT_EQ(fewest_rounds(down, kCandidates), Tiles::Deep64x64);  // whole K: 128 tiles
  down.k_halves = 2;
  EXPECT_EQ(fewest_rounds(down, kCandidates), Tiles::Wide128x64);
  EXPECT_EQ(units_per_tile(down, kCandidates[1]), 2);
  EXPECT_EQ(units_per_tile(down, kCandidates[0]), 1);  // 256 units would need two rounds
  down.m = 2048;
  EXPECT_EQ(fewest_rounds(down, kCandidates), Tiles::Big128x256);
  EXPECT_EQ(units_per_tile(down, kCandidates[2]), 1);
  down.k_halves = 1;
  EXPECT_EQ(units_per_tile(down, kCandidates[1]), 1);  // no halves, nothing to place
  down.m = 128;
  EXPECT_EQ(units_per_tile(down, kCandidates[1]), 1);
}

}  // namespace
}  // namespace hearth::kernels::tiling
