#include "kernels/cuda_check.h"
#include "kernels/half_utils.cuh"
#include "kernels/tp_ops.h"

namespace hearth::kernels {

namespace {

template <typename T>
__global__ void embedding_range_kernel(const T* table, const int32_t* tokens, int hidden,
                                       int vocab_begin, int vocab_end, float* x) {
  const int t = blockIdx.x;
  const int32_t token = tokens[t];
  float* out = x + int64_t(t) * hidden;
  if (token < vocab_begin || token >= vocab_end) {
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) out[i] = 0.0f;
    return;
  }
  const T* row = table + int64_t(token - vocab_begin) * hidden;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) out[i] = HalfTraits<T>::to_float(row[i]);
}

}  // namespace

void embedding_range(Half type, const void* table, const int32_t* tokens, int n, int hidden,
                     int vocab_begin, int vocab_end, float* x, cudaStream_t stream) {
  if (n == 0) return;
  HEARTH_DISPATCH_HALF(type, T,
                       embedding_range_kernel<T>
                       <<<n, 256, 0, stream>>>(static_cast<const T*>(table), tokens, hidden,
                                               vocab_begin, vocab_end, x));
  HEARTH_CUDA_CHECK_LAUNCH();
}

}  // namespace hearth::kernels
