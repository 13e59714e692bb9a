// The epilogue arithmetic both row-invariant matmuls share (batch_matmul.cu on mma.sync,
// wgmma_matmul.cu on Hopper): the same rounding in each, so a row's bits do not depend on which
// kernel's tile wrote it beyond the K order of its accumulator.
#pragma once

#include <cstdint>

#include "kernels/batch_ops.h"
#include "kernels/half_utils.cuh"
#include "kernels/mma.cuh"

namespace hearth::kernels::epilogue {

__device__ __forceinline__ float silu_mul(float g, float u) {
  return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u);
}

// One output of a launch over several weights, as store_pair writes it.
struct StoreTarget {
  void* out;
  int n;
  MatmulEpilogue epilogue;
};

// Writes two adjacent outputs (col, col + 1) of one row of p.out ([rows][p.n]), as p.epilogue
// says: fp32 stored or added to what is there, or rounded to T.
template <typename T, typename Params>
__device__ __forceinline__ void store_pair(const Params& p, int row, int col, float v0, float v1) {
  const int64_t at = int64_t(row) * p.n + col;
  const bool both = col + 1 < p.n, paired = both && (p.n % 2 == 0);
  if (p.epilogue == MatmulEpilogue::StoreF32 || p.epilogue == MatmulEpilogue::AccumulateF32) {
    float* o = static_cast<float*>(p.out) + at;
    if (p.epilogue == MatmulEpilogue::AccumulateF32) {
      if (paired) {
        const float2 old = *reinterpret_cast<const float2*>(o);
        v0 = __fadd_rn(old.x, v0);
        v1 = __fadd_rn(old.y, v1);
      } else {
        v0 = __fadd_rn(o[0], v0);
        if (both) v1 = __fadd_rn(o[1], v1);
      }
    }
    if (paired) {
      *reinterpret_cast<float2*>(o) = make_float2(v0, v1);
    } else {
      o[0] = v0;
      if (both) o[1] = v1;
    }
  } else {
    T* o = static_cast<T*>(p.out) + at;
    if (paired) {
      *reinterpret_cast<uint32_t*>(o) = pack_half2<T>(v0, v1);
    } else {
      o[0] = HalfTraits<T>::from_float(v0);
      if (both) o[1] = HalfTraits<T>::from_float(v1);
    }
  }
}

}  // namespace hearth::kernels::epilogue
