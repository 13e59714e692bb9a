// rmsnorm whose output goes straight to e4m3 (an fp8 model's q/k/v and gate/up input): one
// block per row computes the row's norm as rmsnorm does (same threads, same sum order, same
// expression), rounds each value to the 16-bit type as rmsnorm would store it, and quantizes
// those values by fp8_quantize_rows' rule. So its codes and scales are bit for bit those of
// rmsnorm followed by fp8_quantize_rows, with one launch and no 16-bit row written or re-read.
#include <stdexcept>
#include <string>

#include "kernels/cuda_check.h"
#include "kernels/fp8_e4m3.h"
#include "kernels/fp8_quantize.h"
#include "kernels/half_utils.cuh"
#include "kernels/pdl.cuh"

namespace hearth::kernels {

namespace {

constexpr float kE4m3Max = 448.0f;

// rmsnorm's value i of the row, as the 16-bit type holds it.
template <typename T>
__device__ __forceinline__ float normed(const float* row, const float* weight, float scale, int i) {
  return HalfTraits<T>::to_float(HalfTraits<T>::from_float(weight[i] * (row[i] * scale)));
}

template <typename T>
__global__ void rmsnorm_fp8_kernel(const float* x, const float* weight, int hidden, float eps,
                                   uint8_t* codes, float* scales) {
  allow_dependents_early();  // the fp8 matmul after it may start streaming its weights
  wait_for_producer();       // launched early too: x is the kernel before's output
  __shared__ float scratch[32];
  const float* row = x + int64_t(blockIdx.x) * hidden;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) ss += row[i] * row[i];
  ss = block_sum(ss, scratch);
  const float scale = rsqrtf(ss / float(hidden) + eps);
  float amax = 0.0f;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x)
    amax = fmaxf(amax, fabsf(normed<T>(row, weight, scale, i)));
  __shared__ float warp_amax[32];
  amax = warp_max(amax);
  if (threadIdx.x % 32 == 0) warp_amax[threadIdx.x / 32] = amax;
  __syncthreads();
  amax = 0.0f;
  for (int w = 0; w < int(blockDim.x / 32); ++w) amax = fmaxf(amax, warp_amax[w]);
  const float q = amax > 0.0f ? __fdiv_rn(amax, kE4m3Max) : 1.0f;
  if (threadIdx.x == 0) scales[blockIdx.x] = q;
  uint8_t* dst = codes + int64_t(blockIdx.x) * hidden;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x)
    dst[i] = encode_e4m3(__fdiv_rn(normed<T>(row, weight, scale, i), q));
}

}  // namespace

void rmsnorm_fp8(Half type, const float* x, const float* weight, int n, int hidden, float eps,
                 uint8_t* codes, float* scales, cudaStream_t stream) {
  if (n < 0 || hidden < 1 || !x || !weight || !codes || !scales)
    throw std::invalid_argument("rmsnorm_fp8: bad arguments (n " + std::to_string(n) + ", hidden " +
                                std::to_string(hidden) + ")");
  if (n == 0) return;
  // rmsnorm's block size for this width (kernels/rmsnorm.cu): the sum of squares must be
  // reduced in the same order to give the same bits.
  const int threads = hidden >= 4096 ? 1024 : hidden >= 1024 ? 512 : 128;
  HEARTH_DISPATCH_HALF(type, T,
                       launch_pdl(rmsnorm_fp8_kernel<T>, dim3(n), dim3(threads), 0, stream, x,
                                  weight, hidden, eps, codes, scales));
}

}  // namespace hearth::kernels
