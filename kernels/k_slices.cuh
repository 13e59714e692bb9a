// Fixed K halves for the wgmma matmul tiles (kernels/wgmma_matmul.cu): where a tile's sums of
// one half wait for the other's, whether one block runs both halves (the first's set aside) or
// two blocks one each (the second to finish adds the other's). (The streaming tile,
// kernels/stream_matmul.cu, sums its two halves within its warp.)
//
// Why the bits do not change with M or the tiling: whether a launch is sliced is a function of K
// alone (wgmma_matmul_k_slices: one slice or two halves); each half is one ascending chain of
// k16 steps from zero, as a whole-K launch is; the output is their fp32 sum, the same whichever
// block finishes last (a sum of two does not depend on its order). The counters are left at zero
// for the next launch.
#pragma once

#include "kernels/k_slices_exchange.h"

namespace hearth::kernels::k_slices {

// Stores this thread's `n` sums (n a multiple of 4) as float4s kStride floats apart from `at`
// (16-byte aligned): the threads of a warp at consecutive float4s, so each store is whole lines.
template <int kStride, int n>
__device__ __forceinline__ void store(float* at, const float (&acc)[n]) {
  static_assert(n % 4 == 0, "whole float4s");
#pragma unroll
  for (int i = 0; i < n; i += 4)
    __stcg(reinterpret_cast<float4*>(at + (i / 4) * kStride),
           make_float4(acc[i], acc[i + 1], acc[i + 2], acc[i + 3]));
}

// After a tile's half is stored and fenced: one thread of it counts the arrival; true for the
// second, which also puts the counter back to zero.
__device__ __forceinline__ bool arrive_second(unsigned* counter) {
  const bool second = atomicAdd(counter, 1u) == 1u;
  if (second) *counter = 0;
  return second;
}

// The tile's total: this thread's sums of one half (acc) plus those of the other, stored by
// `store<kStride>` at `other`. Two halves only, so the order of the one addition does not matter
// (an fp32 sum of two is the same either way round), and no second register set is needed.
template <int kStride, int n>
__device__ __forceinline__ void add(float (&acc)[n], const float* other) {
#pragma unroll
  for (int i = 0; i < n; i += 4) {
    const float4 v = __ldcg(reinterpret_cast<const float4*>(other + (i / 4) * kStride));
    acc[i] = __fadd_rn(acc[i], v.x), acc[i + 1] = __fadd_rn(acc[i + 1], v.y);
    acc[i + 2] = __fadd_rn(acc[i + 2], v.z), acc[i + 3] = __fadd_rn(acc[i + 3], v.w);
  }
}

}  // namespace hearth::kernels::k_slices
