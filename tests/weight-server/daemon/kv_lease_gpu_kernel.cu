// The kernel of kv_lease_gpu_test.cc: out[i] = in[idx[i]] * 2 + 1, reading and writing memory
// mapped from leased KV chunks.
#include <cuda_runtime.h>

#include <cstdint>

namespace {

__global__ void permute_scale(const float* in, const int32_t* idx, int64_t n, float* out) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[idx[i]] * 2.0f + 1.0f;
}

}  // namespace

cudaError_t kv_lease_test_permute_scale(const float* in, const int32_t* idx, int64_t n,
                                        float* out) {
  const int threads = 256;
  permute_scale<<<unsigned((n + threads - 1) / threads), threads>>>(in, idx, n, out);
  return cudaGetLastError();
}
