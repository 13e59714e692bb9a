// The row-invariant matmul on Hopper's warpgroup tensor-core path (wgmma + TMA, sm_90a):
// out[m, n] = sum_k A[m, k] * W[n, k] (+ bias[n]) with the epilogues of batch_matmul
// (kernels/batch_ops.h), for 16-bit A and W and fp32 accumulation.
//
// Why every tiling gives the same bits: an output element lives in one fp32 accumulator of one
// thread; it is fed by m64nNk16 steps over K in ascending order from zero, one chain per K slice
// (wgmma_matmul_k_slices: all of K, or two fixed halves where K is long), the halves' sums added
// once (kernels/k_slices.cuh; an fp32 sum of two is the same either way round), so its
// arithmetic is a function of its A row and W row alone.
// Tilings differ only in how many rows (64 per consumer warpgroup) and weight rows (N of the
// instruction) a block covers; tests/kernels/wgmma_matmul_test.cc checks by memcmp that neither
// the instruction's N nor the row's place in the 64 rows changes a result, nor swapping the
// operands and summing the steps on mma.sync (the streaming tile, M8Stream).
#pragma once

#include <cuda_runtime.h>

#include <array>

#include "kernels/batch_ops.h"

namespace hearth::kernels {

// Block tiles: rows x weight rows (for SwiGLU half gate, half up). 16- and 32-row tiles are for
// decode steps; Deep ones run one block per SM with ~190 KB of pipeline (more weight bytes in
// flight, for shapes whose tiles all fit one wave); DeepK256 also moves four 64-wide K boxes per
// pipeline stage (K a multiple of 256); M16N48DeepK256 is the same with 48 weight rows, for
// widths whose 32-row tiles need a second wave but whose 48-row tiles fit one (q, k and v of
// the 8B: 192 tiles or 130); M16N112 streams 112 weight rows a block, two blocks an SM, where
// that spreads the tiles more evenly over the SMs than 64 (gate/up of the 8B: 256 tiles, not
// 448); M16N24/16/8DeepK256 are DeepK256 tiles of fewer weight rows for narrow (tensor-parallel)
// shards whose 32-row tiles leave SMs idle (SwiGLU needs whole 8-column gate and up halves: 24
// and 8 fall back to 16 there); M32/M48/M64 N32/N48 DeepK256 are the same four-box tiles for
// 17-64 rows (one m64 wgmma covers them as it covers 16; 48 rows so that 33-48 rows do not load
// a 64-row A box mostly past the tensor, which streams slower); M32/M64 N112 are M16N112 for
// 17-64 rows; M128N224 covers the 8B's gate/up (SwiGLU: 112 gate and 112 up rows) in 128
// column tiles, one per SM at 128 rows instead of 112 of 256; M256 are 2-block clusters of
// 128-row tiles that share their weight tile (multicast); RegA tiles are their twins with A read
// into registers (wgmma's register-A form): only the weight tile feeds the tensor cores from shared
// memory. M8Stream is not a wgmma tile: a warp per 16 weight rows on mma.sync, operands swapped,
// for up to 8 rows (kernels/stream_matmul.h), listed here so that every tiling test covers it;
// M8Stream8 is the same with a warp per 8 weight rows (twice the warps).
enum class WgmmaTiles {
  Auto,
  M16N32,
  M16N64,
  M16N112,
  M32N32,
  M64N64,
  M16N32Deep,
  M16N32DeepK256,
  M16N48DeepK256,
  M16N24DeepK256,
  M16N16DeepK256,
  M16N8DeepK256,
  M32N32DeepK256,
  M32N48DeepK256,
  M48N32DeepK256,
  M48N48DeepK256,
  M64N32DeepK256,
  M64N48DeepK256,
  M32N112,
  M64N112,
  M32N32Deep,
  M64N32Deep,
  M64N64Deep,
  M64N128,
  M64N256,
  M128N64,
  M128N128,
  M128N192,
  M128N224,
  M128N256,
  M256N128,
  M256N256,
  M16N32DeepK256RegA,
  M16N48DeepK256RegA,
  M16N24DeepK256RegA,
  M32N32DeepK256RegA,
  M32N48DeepK256RegA,
  M48N32DeepK256RegA,
  M48N48DeepK256RegA,
  M64N32DeepK256RegA,
  M64N48DeepK256RegA,
  M8Stream,
  M8Stream8
};
constexpr WgmmaTiles kAllWgmmaTiles[] = {WgmmaTiles::M16N32DeepK256,
                                         WgmmaTiles::M16N48DeepK256,
                                         WgmmaTiles::M16N112,
                                         WgmmaTiles::M16N32,
                                         WgmmaTiles::M16N64,
                                         WgmmaTiles::M32N32,
                                         WgmmaTiles::M64N64,
                                         WgmmaTiles::M16N32Deep,
                                         WgmmaTiles::M32N32Deep,
                                         WgmmaTiles::M64N32Deep,
                                         WgmmaTiles::M64N64Deep,
                                         WgmmaTiles::M64N128,
                                         WgmmaTiles::M64N256,
                                         WgmmaTiles::M128N64,
                                         WgmmaTiles::M128N128,
                                         WgmmaTiles::M128N192,
                                         WgmmaTiles::M128N224,
                                         WgmmaTiles::M128N256,
                                         WgmmaTiles::M256N128,
                                         WgmmaTiles::M256N256,
                                         WgmmaTiles::M16N24DeepK256,
                                         WgmmaTiles::M16N16DeepK256,
                                         WgmmaTiles::M16N8DeepK256,
                                         WgmmaTiles::M32N32DeepK256,
                                         WgmmaTiles::M32N48DeepK256,
                                         WgmmaTiles::M64N32DeepK256,
                                         WgmmaTiles::M64N48DeepK256,
                                         WgmmaTiles::M32N112,
                                         WgmmaTiles::M64N112,
                                         WgmmaTiles::M48N32DeepK256,
                                         WgmmaTiles::M48N48DeepK256,
                                         WgmmaTiles::M16N32DeepK256RegA,
                                         WgmmaTiles::M16N48DeepK256RegA,
                                         WgmmaTiles::M16N24DeepK256RegA,
                                         WgmmaTiles::M32N32DeepK256RegA,
                                         WgmmaTiles::M32N48DeepK256RegA,
                                         WgmmaTiles::M48N32DeepK256RegA,
                                         WgmmaTiles::M48N48DeepK256RegA,
                                         WgmmaTiles::M64N32DeepK256RegA,
                                         WgmmaTiles::M64N48DeepK256RegA,
                                         WgmmaTiles::M8Stream,
                                         WgmmaTiles::M8Stream8};
const char* wgmma_tiles_name(WgmmaTiles t);

// True when the current device can run it (compute capability 9.0, this build has sm_90a code).
bool wgmma_matmul_available();

// How many consecutive K slices every output is summed from: a function of K alone, so every
// row count, tiling and segment of a launch sums alike. Two for K of 12,288 or more in whole
// 512-wide halves (the MLP down projection of 7-70B models: 4,096 outputs over 14,336 at 128
// rows are 32 128 x 128 tiles, a quarter of an H100's SMs, each walking 224 K stages: as halves
// on two blocks, 128 units fill them); else 1. Not for K of 4,096: halves there won o 16-35% at
// 128-256 rows but cost 7-11% from 512 rows and gate/up 10% everywhere (H200, session 22).
int wgmma_matmul_k_slices(int k);
// The workspace a launch of up to m rows needs (0 when K is not sliced): a fixed counter region
// and every tiling's partial sums; n: all segments' columns together; swiglu: n gate and n up
// columns. Zeroed once when allocated; the kernels leave their counters zeroed.
size_t wgmma_matmul_workspace_bytes(int m, int n, int k, bool swiglu);
// Where a tile's two K halves run (the same bits either way; kernels/matmul_tiling.h,
// units_per_tile): Auto, the rule's choice for the tiling; InOneBlock, one block sums both (the
// first's sums set aside in the workspace while the second's chain runs from zero); OnTwoBlocks,
// each half a unit of its own, the two meeting in the workspace. Tests and benchmarks pin it;
// the streaming tile always sums its halves in the warp, and cluster tilings run as their
// one-block twins where K is halved.
enum class KHalvesAt { Auto, InOneBlock, OnTwoBlocks };
// args as for batch_matmul; args.tiles is not used, the workspace only where K is sliced
// (wgmma_matmul_workspace_bytes).
// Requires k % 8 == 0, lda % 8 == 0, 16-byte aligned a and weights. With args.more (q, k and v
// in one launch) each weight keeps its own run of column tiles, numbered and loaded as in a
// launch of it alone, and the tiling is chosen for all the columns together: one launch fills
// the GPU where three narrow ones could not, and every output has the bits of separate calls.
void wgmma_matmul(Half type, MatmulEpilogue epilogue, const MatmulArgs& args, WgmmaTiles tiles,
                  cudaStream_t stream, KHalvesAt halves_at = KHalvesAt::Auto);
// The tiling wgmma_matmul runs for these arguments when asked for `tiles` (Auto: the rule's
// choice for the current device): tests use it to know which kernel a model's launches reach.
WgmmaTiles wgmma_matmul_tiles(MatmulEpilogue epilogue, const MatmulArgs& args,
                              WgmmaTiles tiles = WgmmaTiles::Auto);
// The automatic rule's tiling for m rows of A over weights of `widths` columns (0 past the
// last; SwiGLU: gate's, as many up) and depth k on a GPU of `sms` multiprocessors, before
// wgmma_matmul_tiles' fixes for K and epilogue. Host arithmetic only, no GPU: tests weigh it
// against tilings timed on one (tests/kernels/wgmma_tiling_rule_test.cc).
WgmmaTiles wgmma_matmul_rule(int m, const std::array<int, 3>& widths, int k, bool swiglu, int sms);

}  // namespace hearth::kernels
