// One row's rmsnorm as one block computes it: the sum of squares strided over the block's
// threads, reduced by block_sum, then weight * (x * scale) rounded to 16 bits. Shared by the
// rmsnorm kernel and the all-reduce that norms the rows it sums (kernels/all_reduce.h), so both
// give the same bits: the reduction order is fixed by this code and the block size alone.
#pragma once

#include <cstdint>

#include "kernels/half_utils.cuh"

namespace hearth::kernels {

// Threads per row for `hidden` columns; whoever norms a row must run this many.
__host__ __device__ constexpr int rmsnorm_block_threads(int hidden) {
  return hidden >= 4096 ? 1024 : hidden >= 1024 ? 512 : 128;
}

// rmsnorm of `row` into `out`, by the calling block (blockDim.x = rmsnorm_block_threads(hidden)).
// Every thread of the block must call it; `scratch32` is 32 floats of shared memory.
template <typename T>
__device__ __forceinline__ void rmsnorm_row(const float* row, const float* weight, int hidden,
                                            float eps, T* out, float* scratch32) {
  float ss = 0.0f;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) ss += row[i] * row[i];
  ss = block_sum(ss, scratch32);
  const float scale = rsqrtf(ss / float(hidden) + eps);
  for (int i = threadIdx.x; i < hidden; i += blockDim.x)
    out[i] = HalfTraits<T>::from_float(weight[i] * (row[i] * scale));
}

}  // namespace hearth::kernels
