// Batch-1 GEMV for decode. Each warp owns kRows rows (kRows rows of gate *and* of up for
// SwiGLU) and walks the reduction dimension in 16-byte chunks, keeping kRows x kUnroll
// independent weight loads in flight per thread so the memory system stays saturated. Weights
// bypass L1 (read once); x is tiny and stays cached. Sums run in a fixed order: per lane over
// its chunks, then a fixed butterfly across the warp, so results are bit-reproducible.
#include "kernels/cuda_check.h"
#include "kernels/half_utils.cuh"

namespace hearth::kernels {

namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;

template <typename T>
__device__ __forceinline__ float dot8(uint4 w, const float (&x)[8]) {
  const float2 a = HalfTraits<T>::unpack(w.x), b = HalfTraits<T>::unpack(w.y);
  const float2 c = HalfTraits<T>::unpack(w.z), d = HalfTraits<T>::unpack(w.w);
  float s = a.x * x[0];
  s += a.y * x[1];
  s += b.x * x[2];
  s += b.y * x[3];
  s += c.x * x[4];
  s += c.y * x[5];
  s += d.x * x[6];
  s += d.y * x[7];
  return s;
}

template <typename T>
__device__ __forceinline__ void load_x8(const T* x, int chunk, float (&out)[8]) {
  const uint4 v = __ldg(reinterpret_cast<const uint4*>(x) + chunk);
  const float2 a = HalfTraits<T>::unpack(v.x), b = HalfTraits<T>::unpack(v.y);
  const float2 c = HalfTraits<T>::unpack(v.z), d = HalfTraits<T>::unpack(v.w);
  out[0] = a.x, out[1] = a.y, out[2] = b.x, out[3] = b.y;
  out[4] = c.x, out[5] = c.y, out[6] = d.x, out[7] = d.y;
}

// Dot products of kN rows (row pointers in `rows`) with x, reduced across the warp; every lane
// returns the full sums.
template <typename T, int kN>
__device__ __forceinline__ void warp_dots(const T* const (&rows)[kN], const T* x, int chunks,
                                          float (&acc)[kN]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int r = 0; r < kN; ++r) acc[r] = 0.0f;
  int c = lane;
  for (; c + 32 * (kUnroll - 1) < chunks; c += 32 * kUnroll) {
    uint4 w[kN][kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int r = 0; r < kN; ++r) w[r][u] = load_stream(reinterpret_cast<const uint4*>(rows[r]) + c + 32 * u);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float xv[8];
      load_x8(x, c + 32 * u, xv);
#pragma unroll
      for (int r = 0; r < kN; ++r) acc[r] += dot8<T>(w[r][u], xv);
    }
  }
  for (; c < chunks; c += 32) {
    float xv[8];
    load_x8(x, c, xv);
#pragma unroll
    for (int r = 0; r < kN; ++r) acc[r] += dot8<T>(load_stream(reinterpret_cast<const uint4*>(rows[r]) + c), xv);
  }
#pragma unroll
  for (int r = 0; r < kN; ++r) acc[r] = warp_sum(acc[r]);
}

// Row r of the stacked matrices [w0; w1; w2].
template <typename T>
__device__ __forceinline__ const T* stacked_row(const GemvArgs& a, int r, int& m, int& local) {
  m = r < a.rows[0] ? 0 : r < a.rows[0] + a.rows[1] ? 1 : 2;
  local = m == 0 ? r : m == 1 ? r - a.rows[0] : r - a.rows[0] - a.rows[1];
  return static_cast<const T*>(a.w[m]) + int64_t(local) * a.k;
}

template <typename T, int kRows, bool kAccumulate>
__global__ void __launch_bounds__(kThreads) gemv_store_kernel(GemvArgs a, int total_rows) {
  const int warp = (blockIdx.x * kThreads + threadIdx.x) >> 5;
  const int first = warp * kRows;
  if (first >= total_rows) return;
  const T* rows[kRows];
  int m[kRows], local[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
    rows[r] = stacked_row<T>(a, min(first + r, total_rows - 1), m[r], local[r]);
  float acc[kRows];
  warp_dots<T, kRows>(rows, static_cast<const T*>(a.x), a.k / 8, acc);
  if ((threadIdx.x & 31) == 0) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (first + r >= total_rows) break;
      float* out = a.out[m[r]] + local[r];
      *out = kAccumulate ? *out + acc[r] : acc[r];
    }
  }
}

template <typename T, int kRows>
__global__ void __launch_bounds__(kThreads) gemv_swiglu_kernel(GemvArgs a) {
  const int warp = (blockIdx.x * kThreads + threadIdx.x) >> 5;
  const int first = warp * kRows;
  if (first >= a.rows[0]) return;
  const T* rows[2 * kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int row = min(first + r, a.rows[0] - 1);
    rows[r] = static_cast<const T*>(a.w[0]) + int64_t(row) * a.k;
    rows[kRows + r] = static_cast<const T*>(a.w[1]) + int64_t(row) * a.k;
  }
  float acc[2 * kRows];
  warp_dots<T, 2 * kRows>(rows, static_cast<const T*>(a.x), a.k / 8, acc);
  if ((threadIdx.x & 31) == 0) {
    T* act = static_cast<T*>(a.act);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (first + r >= a.rows[0]) break;
      const float g = acc[r], u = acc[kRows + r];
      act[first + r] = HalfTraits<T>::from_float(g / (1.0f + expf(-g)) * u);
    }
  }
}

int blocks_for(int rows, int rows_per_warp) {
  const int warps = (rows + rows_per_warp - 1) / rows_per_warp;
  return (warps * 32 + kThreads - 1) / kThreads;
}

}  // namespace

void gemv(Half type, GemvEpilogue epilogue, const GemvArgs& a, cudaStream_t stream) {
  if (a.k % 8 != 0) throw std::runtime_error("gemv: the reduction size must be a multiple of 8");
  constexpr int kRows = 2;
  const int total = a.rows[0] + a.rows[1] + a.rows[2];
  HEARTH_DISPATCH_HALF(type, T, {
    switch (epilogue) {
      case GemvEpilogue::Store:
        gemv_store_kernel<T, kRows, false><<<blocks_for(total, kRows), kThreads, 0, stream>>>(a, total);
        break;
      case GemvEpilogue::Accumulate:
        gemv_store_kernel<T, kRows, true><<<blocks_for(total, kRows), kThreads, 0, stream>>>(a, total);
        break;
      case GemvEpilogue::SwiGLU:
        gemv_swiglu_kernel<T, kRows><<<blocks_for(a.rows[0], kRows), kThreads, 0, stream>>>(a);
        break;
    }
  });
  HEARTH_CUDA_CHECK_LAUNCH();
}

}  // namespace hearth::kernels
