// Decode tiles for the row-invariant matmul that stream weights on mma.sync with the operands
// swapped: each warp owns 16 weight rows (the MMA's M) against the launch's up to 8 rows of A
// (its N), over all of K. A one-consumer wgmma tile issues about one wgmma every ~90 clocks
// whatever its width or its accumulator chains (H200, measured), so at a few rows a weight with
// few columns (the 8B's o and down: 4,096) cannot stream faster than its K allows on 64-128
// consumers; warps of their own fill every SM.
//
// The bits are the wgmma tiles': an output is one chain of k16 steps over each K slice
// (wgmma_matmul_k_slices) in ascending order from zero, the halves added (in the warp: the first
// half's sums set aside while the second's chain runs from zero), and a step sums the same 16
// products whichever operand is which and whether wgmma or mma.sync sums them
// (tests/kernels/wgmma_matmul_test.cc checks it by memcmp against every wgmma tiling:
// kernels/wgmma_matmul.h lists these as tilings). Part of the sm_90a object.
#pragma once

#include <cuda_runtime.h>

#include <array>

#include "kernels/batch_ops.h"

namespace hearth::kernels {

// K columns a stage streams: K must be a multiple.
constexpr int kStreamStageK = 256;
// Warps resident on one SM at once: each holds 72 KB of stages.
constexpr int kStreamWarpsPerSm = 3;
// With a warp per 8 weight rows (eight_rows): 48 KB of stages each.
constexpr int kStreamWarpsPerSmEightRows = 4;

// Whether the streaming tile takes a launch: up to 8 rows (the MMA's N), K in whole stages.
constexpr bool stream_matmul_fits(int m, int k) {
  return m <= 8 && k % kStreamStageK == 0;
}

// out as batch_matmul's epilogues, where stream_matmul_fits(a.m, a.k) (else
// std::invalid_argument); the segments as matmul_segments gives them (q, k and v: three), each
// its own run of warps. eight_rows (ignored for SwiGLU): a warp owns 8 weight rows, so twice the
// warps, each output the same chain (the MMA's rows 8-15 repeat the 8 and are dropped).
void stream_matmul(Half type, MatmulEpilogue epilogue, const MatmulArgs& a, int64_t lda,
                   const std::array<MatmulSegment, 3>& segs, int segments, bool eight_rows,
                   cudaStream_t stream);

// The warps a launch over weights of these widths runs (16 weight rows each, eight_rows 8;
// SwiGLU 8 of gate and 8 of up).
int stream_matmul_warps(const std::array<int, 3>& widths, bool swiglu, bool eight_rows);

}  // namespace hearth::kernels
