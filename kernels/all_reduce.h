// The fixed-order all-reduce kernel (issue 26): every rank of one process sums the ranks'
// fp32 partials in rank order 0, 1, ..., N-1 and adds the sum to its fp32 residual, the
// arithmetic of the CPU engine's tensor parallel ranks (CpuBackend::row_parallel then x += sum),
// so every rank holds identical bits whatever the row count or timing. PeerAllReduce owns the
// buffers; this is the launch alone.
//
// One shot: every rank stages its partial, then reads every peer's whole partial and sums.
// Two shots (large counts over three or more ranks): each rank sums one N-th slice from every
// rank (reduce-scatter) and stages the sum, then every rank reads the N sums (all-gather): each
// rank reads 2 (N-1)/N of the count from its peers instead of N-1 times it. Each element is the
// same rank-order sum either way, so the choice moves no bit.
//
// One shot with a norm: the same sum into `out`, and then rmsnorm of each summed row into
// norm.out in the same launch (the rmsnorm kernel's bits: kernels/rmsnorm_row.cuh), so the norm
// that follows an all-reduce in a layer needs no launch of its own. Block b stages, sums and
// norms whole rows b, b + blocks, ... (with norm.hidden's rmsnorm block size), on every rank.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/ops.h"

namespace hearth::kernels {

inline constexpr int kMaxAllReduceRanks = 8;
// The grid is fixed for the life of the buffers: block b of every rank meets block b of every
// peer at a flag barrier, so all ranks must run the same grid (and it must be co-resident).
inline constexpr int kMaxAllReduceBlocks = 256;

// rmsnorm of the all-reduce's summed rows (count / hidden of them) into `out`.
struct AllReduceNorm {
  const float* weight = nullptr;  // hidden floats
  int hidden = 0;
  float eps = 0.0f;
  Half type = Half::BF16;
  void* out = nullptr;  // [count / hidden][hidden] 16-bit values of `type`
};

struct AllReduceArgs {
  // Rank p's staging buffer, two halves of `capacity` floats (the epoch's parity picks one),
  // readable from every rank's device.
  float* staging[kMaxAllReduceRanks];
  // Rank p's arrival flags, [kMaxAllReduceBlocks][kMaxAllReduceRanks]: peers write, p polls.
  uint32_t* flags[kMaxAllReduceRanks];
  uint32_t* epochs;  // this rank's completed launches, per block (local memory)
  int64_t capacity;
  int rank, n_ranks, blocks;
  const float* partial;  // this rank's partial, `count` floats on its device
  float* out;            // this rank's result: out = (accumulate ? out : 0) + sum, in fp32
  int64_t count;
  bool accumulate;
  bool two_shot;  // the same on every rank for a call (PeerAllReduce decides by count)
  // With norm.weight: one shot (two_shot false) that also norms the rows; count a multiple of
  // norm.hidden. The same on every rank for a call.
  AllReduceNorm norm;
};

// Launches on `stream` (which must belong to rank a.rank's device). Every rank must launch the
// same count, in the same sequence of calls; a rank whose peers never arrive traps after ~10 s
// rather than hang.
void launch_fixed_order_all_reduce(const AllReduceArgs& a, cudaStream_t stream);

}  // namespace hearth::kernels
