// The row-invariant matmul on Hopper's warpgroup tensor-core path (wgmma + TMA, sm_90a):
// out[m, n] = sum_k A[m, k] * W[n, k] (+ bias[n]) with the epilogues of batch_matmul
// (kernels/batch_ops.h), for 16-bit A and W and fp32 accumulation.
//
// Why every tiling gives the same bits: an output element lives in one fp32 accumulator of one
// thread; it is fed by m64nNk16 steps over K in ascending order from zero, the whole of K in one
// chain (no split of K at all), so its arithmetic is a function of its A row and W row alone.
// Tilings differ only in how many rows (64 per consumer warpgroup) and weight rows (N of the
// instruction) a block covers; tests/kernels/wgmma_matmul_test.cc checks by memcmp that neither
// the instruction's N nor the row's place in the 64 rows changes a result, nor swapping the
// operands and summing the steps on mma.sync (the streaming tile, M8Stream).
#pragma once

#include <cuda_runtime.h>

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
// 17-64 rows; M256 are 2-block clusters of 128-row tiles that share their weight tile
// (multicast); RegA tiles are their twins with A read into registers (wgmma's register-A form):
// only the weight tile feeds the tensor cores from shared memory. M8Stream is not a wgmma tile:
// a warp per 16 weight rows on mma.sync, operands swapped, for up to 8 rows
// (kernels/stream_matmul.h), listed here so that every tiling test covers it; M8Stream8 is the
// same with a warp per 8 weight rows (twice the warps).
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
// args as for batch_matmul; args.tiles and the workspace are not used (no K split: none needed).
// Requires k % 8 == 0, lda % 8 == 0, 16-byte aligned a and weights. With args.more (q, k and v
// in one launch) each weight keeps its own run of column tiles, numbered and loaded as in a
// launch of it alone, and the tiling is chosen for all the columns together: one launch fills
// the GPU where three narrow ones could not, and every output has the bits of separate calls.
void wgmma_matmul(Half type, MatmulEpilogue epilogue, const MatmulArgs& args, WgmmaTiles tiles,
                  cudaStream_t stream);
// The tiling wgmma_matmul runs for these arguments when asked for `tiles` (Auto: the rule's
// choice for the current device): tests use it to know which kernel a model's launches reach.
WgmmaTiles wgmma_matmul_tiles(MatmulEpilogue epilogue, const MatmulArgs& args,
                              WgmmaTiles tiles = WgmmaTiles::Auto);

}  // namespace hearth::kernels
