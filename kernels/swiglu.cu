#include <algorithm>

#include "kernels/cuda_check.h"
#include "kernels/half_utils.cuh"

namespace hearth::kernels {

namespace {

template <typename T>
__device__ __forceinline__ float as_float(T v) {
  return HalfTraits<T>::to_float(v);
}
__device__ __forceinline__ float as_float(float v) {
  return v;
}

template <typename In, typename T>
__global__ void swiglu_kernel(const In* gate, const In* up, T* act, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float g = as_float(gate[i]);
    act[i] = HalfTraits<T>::from_float(g / (1.0f + expf(-g)) * as_float(up[i]));
  }
}

template <typename In, typename T>
void launch(const void* gate, const void* up, void* act, int64_t count, cudaStream_t stream) {
  const int blocks = int(std::min<int64_t>((count + 255) / 256, 132 * 16));
  swiglu_kernel<In, T><<<blocks, 256, 0, stream>>>(
      static_cast<const In*>(gate), static_cast<const In*>(up), static_cast<T*>(act), count);
}

}  // namespace

void swiglu(Half type, const void* gate, const void* up, void* act, int64_t count,
            cudaStream_t stream, bool fp32_inputs) {
  HEARTH_DISPATCH_HALF(type, T, {
    if (fp32_inputs)
      launch<float, T>(gate, up, act, count, stream);
    else
      launch<T, T>(gate, up, act, count, stream);
  });
  HEARTH_CUDA_CHECK_LAUNCH();
}

}  // namespace hearth::kernels
