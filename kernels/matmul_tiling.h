// How both TMA-fed wgmma matmuls (16-bit: wgmma_matmul.cu, fp8: fp8_matmul.cu) pick a tiling
// for a launch: one rule, each kernel mapping it onto its own tile list. Any tiling gives the
// same bits in either kernel; this is about speed. Host code, C++17 (included by .cu files).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>

namespace hearth::kernels::tiling {

inline int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

struct LaunchShape {
  int m = 0;                    // rows of A
  std::array<int, 3> widths{};  // each weight's columns (q, k and v: three; 0 past the last)
  int k = 0;
  bool swiglu = false;  // a weight tile of N rows holds N / 2 gate and N / 2 up rows
  int k_per_stage = 0;  // K a four-box stage covers (four boxes need K in whole stages)
  int64_t sms = 0;
  int k_halves = 1;  // K summed as this many fixed halves (1 or 2: wgmma_matmul_k_slices)

  int64_t weight_rows() const {
    int64_t rows = 0;
    for (int w : widths) rows += swiglu ? 2 * int64_t(w) : w;
    return rows;
  }
  // Column tiles of `bn` weight rows, counted per weight as a launch numbers them (a weight's
  // last tile may be partial).
  int64_t column_tiles(int bn) const {
    int64_t tiles = 0;
    for (int w : widths) tiles += ceil_div(w, swiglu ? bn / 2 : bn);
    return tiles;
  }
};

// The decode tiles (up to 64 rows) both kernels have; Large: the row count is a prompt's.
enum class DecodeTile {
  M16N32DeepFourBoxes,
  M16N48DeepFourBoxes,
  M16N24DeepFourBoxes,
  M32N32DeepFourBoxes,
  M32N48DeepFourBoxes,
  M48N32DeepFourBoxes,
  M48N48DeepFourBoxes,
  M64N32DeepFourBoxes,
  M64N48DeepFourBoxes,
  M16N32Deep,
  M16N64,
  M16N112,
  M16N32,
  M32N32Deep,
  M32N32,
  M32N112,
  M64N112,
  M64N32Deep,
  M64N64Deep,
  M64N64,
  Large
};

// Weight rows the busiest SM streams when `tiles` tiles of `bn` rows run on a persistent grid of
// at most `per_sm` blocks an SM: block b takes tiles b, b + grid, ...; blocks b, b + sms, ...
// share an SM, so SM 0 (the lowest block indexes, which take the leftover tiles) is the busiest.
inline int64_t busiest_sm_rows(int64_t tiles, int bn, int per_sm, int64_t sms) {
  const int64_t grid = tiles < sms * per_sm ? tiles : sms * per_sm;
  int64_t most = 0;
  for (int64_t b = 0; b < grid; b += sms) most += tiles / grid + (b < tiles % grid ? 1 : 0);
  return most * bn;
}

// Decode is bandwidth-bound: small row tiles keep the most weight bytes in flight, and when
// 32-row weight tiles all fit one wave, one deep block per SM keeps the most. Such a block
// streams its column tile through a chain of small wgmmas; four K boxes a stage cut the barrier
// round trips per byte (H100, 8B at 1-16 rows: down 59 -> 44 us, o 17.8 -> 14.6 us; cuBLASLt 45
// and 16). Where 32-row tiles need a second wave that 48-row ones do not (q, k and v of the 8B:
// 192 tiles, or 130), the wider tile keeps every SM streaming to the end instead of a third of
// them finishing a second wave alone. Where 32-row tiles leave half the SMs or more idle (a
// tensor-parallel shard: the 8B's q, k and v at TP=4 are 48 tiles), 24-row tiles spread it
// over more of them (65). Measured on the H200 (one launch, 1-16 rows): TP=4 q/k/v 13.3 us at
// 32, 11.1 at 24, 12.0 at 16, 17.6 at 8; TP=2 (96 tiles of 32) 14.5 at 32 and 16.0 at 24, so a
// shard that already covers most SMs keeps 32. Not for SwiGLU: a 24-row tile would split an
// 8-column group of gate or up.
inline DecodeTile decode_tile(const LaunchShape& s) {
  if (s.m > 64) return DecodeTile::Large;
  const bool one_wave = s.column_tiles(32) <= s.sms;
  if (s.m <= 16 && s.k % s.k_per_stage == 0) {
    if (!s.swiglu && 2 * s.column_tiles(32) <= s.sms && s.column_tiles(24) <= s.sms)
      return DecodeTile::M16N24DeepFourBoxes;
    if (one_wave) return DecodeTile::M16N32DeepFourBoxes;
    if (s.column_tiles(48) <= s.sms) return DecodeTile::M16N48DeepFourBoxes;
  }
  if (s.m <= 16 && one_wave) return DecodeTile::M16N32Deep;
  // Two blocks an SM stream the tiles; the step lasts as long as the busiest SM streams. 448
  // 64-row tiles of the 8B's gate/up leave 52 SMs four tiles and 80 three (85% of the mean load
  // on the busiest); 256 of 112 rows give 124 SMs two and 8 one (97%).
  const bool wide = s.weight_rows() / 64 >= 2 * s.sms;
  const int bn = wide ? 64 : 32;
  const bool rows112 = !one_wave && busiest_sm_rows(s.column_tiles(112), 112, 2, s.sms) * 20 <
                                        busiest_sm_rows(s.column_tiles(bn), bn, 2, s.sms) * 19;
  if (s.m <= 16) {
    if (rows112) return DecodeTile::M16N112;
    return wide ? DecodeTile::M16N64 : DecodeTile::M16N32;
  }
  // 17-64 rows: the same four-box tiles (one m64 wgmma covers 64 rows as it covers 16), where
  // they fit one wave. 48-row tiles for 33-48 rows: a 64-row A box more than 16 rows past the
  // descriptor's last row streams slower (H100, down: 61.8 us at 33 rows, 53.6 at 40, 47.7 at
  // 48 and 64). Measured before the descriptor spanned whole tiles (batch_ops.h, a_map_rows),
  // which removes that cause where the caller's buffer holds the rows; 64-row tiles at 33-48
  // rows have not been timed since.
  if (s.m <= 64 && s.k % s.k_per_stage == 0) {
    const int rows = s.m <= 32 ? 32 : s.m <= 48 ? 48 : 64;
    if (one_wave)
      return rows == 32   ? DecodeTile::M32N32DeepFourBoxes
             : rows == 48 ? DecodeTile::M48N32DeepFourBoxes
                          : DecodeTile::M64N32DeepFourBoxes;
    if (s.column_tiles(48) <= s.sms)
      return rows == 32   ? DecodeTile::M32N48DeepFourBoxes
             : rows == 48 ? DecodeTile::M48N48DeepFourBoxes
                          : DecodeTile::M64N48DeepFourBoxes;
  }
  // The 16-row rule's 112-wide streaming tiles carry over too (the 8B's gate/up at 17-64 rows:
  // H100, 91.5 us at 32 rows with 32-wide tiles against 78.8 at 16 with 112).
  if (rows112) return s.m <= 32 ? DecodeTile::M32N112 : DecodeTile::M64N112;
  if (s.m <= 32) return one_wave ? DecodeTile::M32N32Deep : DecodeTile::M32N32;
  if (one_wave) return DecodeTile::M64N32Deep;
  return ceil_div(s.weight_rows(), 64) <= s.sms ? DecodeTile::M64N64Deep : DecodeTile::M64N64;
}

// A prompt-size tiling and what one full wave of it achieves relative to the best (measured
// with hearth-matmul-bench). `cluster` blocks of consecutive row tiles share each weight tile
// (multicast), so row tiles come in whole clusters; clusters sum all of K in one chain.
template <typename Tiles>
struct Candidate {
  Tiles tiles;
  int rows, weight_rows, per_sm;
  double efficiency;
  int cluster = 1;
};

// A launch whose K is summed in two fixed halves runs each tile's halves either in one block
// (the first half's sums set aside while the second's chain runs from zero: one unit a tile) or
// as two units on two blocks that meet in a workspace: twice the units at half the work each,
// which fills SMs a launch of few tiles leaves idle, at the cost of the exchange and the second
// block's addition. The bits are the same either way. kAcrossBlocksCost is that cost as a factor
// on a unit's work, fitted on the 8B's down (H200, 96-2,048 rows; kernels/notes/wgmma_matmul.md
// "K halves, in a block or across two"): the measured ratios put it between 1.04 and 1.36.
constexpr double kAcrossBlocksCost = 1.2;

// What `units_per_tile` units a tile of candidate `c` cost: rounds of resident units, weighted
// by a unit's work over the tiling's rate.
template <typename Tiles>
double rounds_cost(const LaunchShape& s, const Candidate<Tiles>& c, int units_per_tile) {
  // A cluster sums all of K in one chain: where K is halved its one-block twin runs instead.
  if (c.cluster > 1 && s.k_halves > 1) return std::numeric_limits<double>::infinity();
  const int64_t row_tiles = ceil_div(ceil_div(s.m, c.rows), c.cluster) * c.cluster;
  const int64_t units = row_tiles * ceil_div(s.weight_rows(), c.weight_rows) * units_per_tile;
  const double rounds = double(ceil_div(units, s.sms * c.per_sm));
  const double unit_work = double(c.rows) * c.weight_rows * c.per_sm / units_per_tile;
  return rounds * unit_work / c.efficiency * (units_per_tile > 1 ? kAcrossBlocksCost : 1.0);
}

// Units a tile of candidate `c` runs as: the launch's K halves (2) where running them on two
// blocks costs less, else 1.
template <typename Tiles>
int units_per_tile(const LaunchShape& s, const Candidate<Tiles>& c) {
  return s.k_halves > 1 && rounds_cost(s, c, s.k_halves) < rounds_cost(s, c, 1) ? s.k_halves : 1;
}

// The candidate with the fewest rounds of resident units, weighted by their work over its rate
// (each at its cheaper units_per_tile).
template <typename Tiles, size_t N>
Tiles fewest_rounds(const LaunchShape& s, const Candidate<Tiles> (&candidates)[N]) {
  Tiles best = candidates[N - 1].tiles;
  double best_cost = 1e300;
  for (const Candidate<Tiles>& c : candidates) {
    const double cost = rounds_cost(s, c, units_per_tile(s, c));
    if (cost < best_cost) best_cost = cost, best = c.tiles;
  }
  return best;
}

}  // namespace hearth::kernels::tiling
