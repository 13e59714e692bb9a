// One block per row: the row's largest magnitude (a max, so its order does not matter), then
// every value divided by the scale and encoded with kernels/fp8_e4m3.h. Both passes read the
// row as 16-byte vectors; the second finds it in L1/L2.
#include "kernels/fp8_quantize.h"

#include <stdexcept>
#include <string>

#include "kernels/cuda_check.h"
#include "kernels/fp8_e4m3.h"
#include "kernels/half_utils.cuh"
#include "kernels/pdl.cuh"

namespace hearth::kernels {

namespace {

constexpr int kThreads = 256;
constexpr float kE4m3Max = 448.0f;

template <typename T>
__device__ __forceinline__ void unpack8(uint4 v, float (&x)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = HalfTraits<T>::unpack(w[i]);
    x[2 * i] = f.x;
    x[2 * i + 1] = f.y;
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    fp8_quantize_rows_kernel(const T* in, int64_t ld, int k, uint8_t* codes, float* scales) {
  // Launched with programmatic dependent launch: the matmul after it may start streaming its
  // weights now; this kernel reads and writes nothing before the kernels ahead of it are done.
  allow_dependents_early();
  wait_for_producer();
  const int64_t row = blockIdx.x;
  const T* src = in + row * ld;
  uint8_t* dst = codes + row * int64_t(k);
  float amax = 0.0f;
#pragma unroll 4
  for (int i = threadIdx.x * 8; i < k; i += kThreads * 8) {
    float x[8];
    unpack8<T>(*reinterpret_cast<const uint4*>(src + i), x);
#pragma unroll
    for (int j = 0; j < 8; ++j) amax = fmaxf(amax, fabsf(x[j]));
  }
  __shared__ float warp_amax[kThreads / 32];
  amax = warp_max(amax);
  if (threadIdx.x % 32 == 0) warp_amax[threadIdx.x / 32] = amax;
  __syncthreads();
  amax = 0.0f;
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) amax = fmaxf(amax, warp_amax[w]);
  const float scale = amax > 0.0f ? __fdiv_rn(amax, kE4m3Max) : 1.0f;
  if (threadIdx.x == 0) scales[row] = scale;
#pragma unroll 2
  for (int i = threadIdx.x * 8; i < k; i += kThreads * 8) {
    float x[8];
    unpack8<T>(*reinterpret_cast<const uint4*>(src + i), x);
    uint32_t packed[2] = {0, 0};
#pragma unroll
    for (int j = 0; j < 8; ++j)
      packed[j / 4] |= uint32_t(encode_e4m3(__fdiv_rn(x[j], scale))) << (8 * (j % 4));
    *reinterpret_cast<uint2*>(dst + i) = make_uint2(packed[0], packed[1]);
  }
}

[[noreturn]] void fail(const std::string& what) {
  throw std::invalid_argument("fp8_quantize_rows: " + what);
}

}  // namespace

void fp8_quantize_rows(Half type, const Fp8QuantizeArgs& a, cudaStream_t stream) {
  const int64_t ld = a.ld ? a.ld : a.k;
  if (a.rows < 0 || a.k < 8 || a.k % 8 != 0)
    fail("k must be a positive multiple of 8 (k " + std::to_string(a.k) + ", rows " +
         std::to_string(a.rows) + ")");
  if (ld < a.k || ld % 8 != 0)
    fail("ld (" + std::to_string(ld) + ") must be >= k and a multiple of 8");
  if (!a.in || !a.codes || !a.scales) fail("in, codes and scales are required");
  if ((reinterpret_cast<uintptr_t>(a.in) & 15) || (reinterpret_cast<uintptr_t>(a.codes) & 7))
    fail("in must be 16-byte and codes 8-byte aligned");
  if (a.rows == 0) return;
  HEARTH_DISPATCH_HALF(type, T, {
    fp8_quantize_rows_kernel<T>
        <<<a.rows, kThreads, 0, stream>>>(static_cast<const T*>(a.in), ld, a.k, a.codes, a.scales);
  });
  HEARTH_CUDA_CHECK(cudaGetLastError());
}

}  // namespace hearth::kernels
