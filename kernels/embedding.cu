#include "kernels/cuda_check.h"
#include "kernels/half_utils.cuh"

namespace hearth::kernels {

namespace {

template <typename T>
__global__ void embedding_kernel(const T* table, const int32_t* tokens, int hidden, float* x) {
  const int t = blockIdx.x;
  const T* row = table + int64_t(tokens[t]) * hidden;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x)
    x[int64_t(t) * hidden + i] = HalfTraits<T>::to_float(row[i]);
}

}  // namespace

void embedding(Half type, const void* table, const int32_t* tokens, int n, int hidden, float* x,
               cudaStream_t stream) {
  HEARTH_DISPATCH_HALF(type, T,
                       embedding_kernel<T>
                       <<<n, 256, 0, stream>>>(static_cast<const T*>(table), tokens, hidden, x));
  HEARTH_CUDA_CHECK_LAUNCH();
}

}  // namespace hearth::kernels
