// What the wgmma and fp8 matmul tests share: the skips for a device without sm_90a, the list of
// every tiling plus the automatic choice, and the row-invariance sweep (a row's bits whatever the
// tiling, the batch's row count and the row's place in the batch).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <iterator>
#include <vector>

#include "kernels/fp8_matmul.h"
#include "kernels/wgmma_matmul.h"
#include "tests/kernels/gpu_test_util.h"

#define HEARTH_REQUIRE_WGMMA()                      \
  HEARTH_REQUIRE_GPU();                             \
  if (!::hearth::kernels::wgmma_matmul_available()) \
  GTEST_SKIP() << "no compute-capability 9.0 device (wgmma needs sm_90a)"

#define HEARTH_REQUIRE_FP8()                      \
  HEARTH_REQUIRE_GPU();                           \
  if (!::hearth::kernels::fp8_matmul_available()) \
  GTEST_SKIP() << "no compute-capability 9.0 device (the fp8 wgmma needs sm_90a)"

namespace hearth::test {

// Every tiling of `all`, then Tiles::Auto.
template <typename Tiles, size_t N>
std::vector<Tiles> every_tiling_and_auto(const Tiles (&all)[N]) {
  std::vector<Tiles> tilings(std::begin(all), std::end(all));
  tilings.push_back(Tiles::Auto);
  return tilings;
}

// compute(tiles, first_row, m) runs rows first_row .. first_row + m - 1 of a pool of `pool` rows
// and returns their outputs (row_bytes each) from the device. The whole pool by `reference`,
// then by every tiling of `all`: the same bits. Then batches of every bucket from 1 to 2,048,
// starting at rows that put each row at another place in its 64-row wgmma (first rows not a
// multiple of 64), by Tiles::Auto and, on a fifth of them, by every tiling: the pool's bits.
template <typename Tiles, size_t N, typename Compute, typename NameOf>
void expect_rows_alike_whatever_the_tiling_and_batch(const Tiles (&all)[N], Tiles reference,
                                                     int pool, size_t row_bytes,
                                                     const Compute& compute,
                                                     const NameOf& name_of) {
  const std::vector<unsigned char> full = compute(reference, 0, pool);
  for (Tiles tiles : all)
    EXPECT_EQ(0, std::memcmp(full.data(), compute(tiles, 0, pool).data(), full.size()))
        << "tiling " << name_of(tiles);
  const int ms[] = {1,   2,   3,   5,   8,   13,  16,  31,  32,  33,  63,   64,   65,   100,
                    127, 128, 129, 200, 255, 256, 257, 383, 512, 700, 1000, 1024, 1500, 2048};
  const int firsts[] = {0, 1, 17, 37, 64};
  int checked = 0;
  for (int m : ms)
    for (int first : firsts) {
      if (first + m > pool) continue;
      const bool all_tilings = (checked++ % 5) == 0;
      std::vector<Tiles> tilings{Tiles::Auto};
      if (all_tilings) tilings.insert(tilings.end(), std::begin(all), std::end(all));
      for (Tiles tiles : tilings) {
        const std::vector<unsigned char> got = compute(tiles, first, m);
        EXPECT_EQ(0, std::memcmp(full.data() + size_t(first) * row_bytes, got.data(), got.size()))
            << "m " << m << " first row " << first << " tiling " << name_of(tiles);
      }
    }
}

}  // namespace hearth::test
