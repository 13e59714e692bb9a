#include <algorithm>

#include "kernels/cuda_check.h"
#include "kernels/half_utils.cuh"

namespace hearth::kernels {

namespace {

template <typename T>
__global__ void swiglu_kernel(const T* gate, const T* up, T* act, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float g = HalfTraits<T>::to_float(gate[i]);
    act[i] = HalfTraits<T>::from_float(g / (1.0f + expf(-g)) * HalfTraits<T>::to_float(up[i]));
  }
}

}  // namespace

void swiglu(Half type, const void* gate, const void* up, void* act, int64_t count,
            cudaStream_t stream) {
  const int blocks = int(std::min<int64_t>((count + 255) / 256, 132 * 16));
  HEARTH_DISPATCH_HALF(
      type, T,
      swiglu_kernel<T><<<blocks, 256, 0, stream>>>(
          static_cast<const T*>(gate), static_cast<const T*>(up), static_cast<T*>(act), count));
  HEARTH_CUDA_CHECK_LAUNCH();
}

}  // namespace hearth::kernels
