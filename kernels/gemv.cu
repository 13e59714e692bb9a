// Batch-1 GEMV for decode. A warp owns kN dot products (one row; gate and up of one row for
// SwiGLU; the two rows of a RoPE pair for QkvRope) and walks the reduction dimension in
// 16-byte chunks with 8 weight loads in flight per thread, double-buffered in registers: the
// next loads are issued before the current chunks are used. Weights bypass L1 (read once).
// Before waiting for the previous kernel (programmatic dependent launch) each warp already
// issues its first weight loads, so the weight stream never stops between kernels.
// Sums run in a fixed order (per lane over its chunks, then a fixed butterfly), so results
// are bit-reproducible.
#include "kernels/cuda_check.h"
#include "kernels/half_utils.cuh"
#include "kernels/pdl.cuh"

namespace hearth::kernels {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kLoadsInFlight = 8;

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

// x for chunk c (8 values): from the block's normalised fp32 copy, or 16-bit from global.
template <typename T, bool kNorm>
__device__ __forceinline__ void load_x(const float* xs, const T* x, int c, float (&out)[8]) {
  if constexpr (kNorm) {
    const float4 a = reinterpret_cast<const float4*>(xs)[2 * c];
    const float4 b = reinterpret_cast<const float4*>(xs)[2 * c + 1];
    out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
    out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
  } else {
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(x) + c);
    const float2 a = HalfTraits<T>::unpack(v.x), b = HalfTraits<T>::unpack(v.y);
    const float2 e = HalfTraits<T>::unpack(v.z), d = HalfTraits<T>::unpack(v.w);
    out[0] = a.x, out[1] = a.y, out[2] = b.x, out[3] = b.y;
    out[4] = e.x, out[5] = e.y, out[6] = d.x, out[7] = d.y;
  }
}

// The rows one warp multiplies, and what its epilogue needs to know.
struct Item {
  const void* rows[2];
  int matrix;  // stacked matrix index (Store, QkvRope)
  int local;   // row within that matrix (Store/Accumulate/SwiGLU), or head * head_dim + i (QkvRope)
};

template <GemvEpilogue E, int kN>
__device__ __forceinline__ bool item_for(const GemvArgs& a, int index, Item& it) {
  const size_t elem = 2;
  auto row = [&](int m, int r) { return static_cast<const char*>(a.w[m]) + size_t(r) * a.k * elem; };
  if constexpr (E == GemvEpilogue::QkvRope) {
    // RoPE pairs (i, i + head_dim/2): q heads, then k heads, then v heads.
    const int half = a.head_dim / 2;
    int m = 0, j = index;
    while (m < 3 && j >= a.rows[m] / 2) j -= a.rows[m++] / 2;
    if (m == 3) return false;
    const int r = (j / half) * a.head_dim + j % half;
    it = {{row(m, r), row(m, r + half)}, m, r};
  } else if constexpr (E == GemvEpilogue::SwiGLU) {
    if (index >= a.rows[0]) return false;
    it = {{row(0, index), row(1, index)}, 0, index};
  } else {
    int m = 0, r = index;
    while (m < 3 && r >= a.rows[m]) r -= a.rows[m++];
    if (m == 3) return false;
    it = {{row(m, r), nullptr}, m, r};
  }
  return true;
}

template <typename T, GemvEpilogue E>
__device__ __forceinline__ void epilogue(const GemvArgs& a, const Item& it, const float* acc) {
  if constexpr (E == GemvEpilogue::Store) {
    a.out[it.matrix][it.local] = acc[0];
  } else if constexpr (E == GemvEpilogue::Accumulate) {
    a.out[it.matrix][it.local] += acc[0];
  } else if constexpr (E == GemvEpilogue::SwiGLU) {
    const float g = acc[0];
    static_cast<T*>(a.act)[it.local] = HalfTraits<T>::from_float(g / (1.0f + expf(-g)) * acc[1]);
  } else {
    const int half = a.head_dim / 2, r = it.local, i = r % a.head_dim, head = r / a.head_dim;
    float x0 = acc[0], x1 = acc[1];
    if (const float* b = a.bias[it.matrix]) {
      x0 += b[r];
      x1 += b[r + half];
    }
    const int pos = a.pos[0];
    if (it.matrix < 2) {
      float s, c;
      sincosf(float(pos) * a.inv_freq[i], &s, &c);
      const float r0 = x0 * c - x1 * s, r1 = x1 * c + x0 * s;
      x0 = r0;
      x1 = r1;
    }
    T* dst = it.matrix == 0 ? static_cast<T*>(a.q_out) + r
                            : static_cast<T*>(it.matrix == 1 ? a.k_cache : a.v_cache) +
                                  (size_t(head) * a.context + pos) * a.head_dim + i;
    dst[0] = HalfTraits<T>::from_float(x0);
    dst[half] = HalfTraits<T>::from_float(x1);
  }
}

template <typename T, GemvEpilogue E, bool kNorm>
__global__ void __launch_bounds__(kThreads) gemv_kernel(GemvArgs a) {
  constexpr int kN = (E == GemvEpilogue::SwiGLU || E == GemvEpilogue::QkvRope) ? 2 : 1;
  constexpr int kU = kLoadsInFlight / kN;  // chunks per lane per step
  extern __shared__ float4 smem_x[];
  float* xs = reinterpret_cast<float*>(smem_x);
  allow_dependents_early();

  const int lane = threadIdx.x & 31;
  const int chunks = a.k / 8;
  Item it;
  const bool active = item_for<E, kN>(a, blockIdx.x * kWarps + (threadIdx.x >> 5), it);

  // First loads go out before waiting for the producer of x: weights do not depend on it.
  uint4 cur[kN][kU], next[kN][kU];
  auto load = [&](uint4 (&w)[kN][kU], int base) {
#pragma unroll
    for (int u = 0; u < kU; ++u)
#pragma unroll
      for (int n = 0; n < kN; ++n)
        if (active && base + 32 * u < chunks)
          w[n][u] = load_stream(static_cast<const uint4*>(it.rows[n]) + base + 32 * u);
  };
  load(cur, lane);

  wait_for_producer();
  if constexpr (kNorm) {
    __shared__ float scratch[32];
    float ss = 0.0f;
    for (int i = threadIdx.x; i < a.k; i += kThreads) ss += a.x_norm[i] * a.x_norm[i];
    ss = block_sum(ss, scratch);
    const float scale = rsqrtf(ss / float(a.k) + a.eps);
    for (int i = threadIdx.x; i < a.k; i += kThreads) xs[i] = a.norm_weight[i] * (a.x_norm[i] * scale);
    __syncthreads();
  }
  if (!active) return;

  float acc[kN] = {};
  for (int base = lane; base < chunks; base += 32 * kU) {
    load(next, base + 32 * kU);
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      if (base + 32 * u >= chunks) break;
      float xv[8];
      load_x<T, kNorm>(xs, static_cast<const T*>(a.x), base + 32 * u, xv);
#pragma unroll
      for (int n = 0; n < kN; ++n) acc[n] += dot8<T>(cur[n][u], xv);
    }
#pragma unroll
    for (int u = 0; u < kU; ++u)
#pragma unroll
      for (int n = 0; n < kN; ++n) cur[n][u] = next[n][u];
  }
#pragma unroll
  for (int n = 0; n < kN; ++n) acc[n] = warp_sum(acc[n]);
  if (lane == 0) epilogue<T, E>(a, it, acc);
}

template <typename T, GemvEpilogue E, bool kNorm>
void launch(const GemvArgs& a, cudaStream_t stream) {
  int items = 0;
  if (E == GemvEpilogue::QkvRope) items = (a.rows[0] + a.rows[1] + a.rows[2]) / 2;
  else if (E == GemvEpilogue::SwiGLU) items = a.rows[0];
  else items = a.rows[0] + a.rows[1] + a.rows[2];
  const size_t smem = kNorm ? size_t(a.k) * sizeof(float) : 0;
  static bool configured = false;
  if (kNorm && !configured) {
    HEARTH_CUDA_CHECK(cudaFuncSetAttribute(gemv_kernel<T, E, kNorm>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           64 * 1024));
    configured = true;
  }
  launch_pdl(gemv_kernel<T, E, kNorm>, dim3((items + kWarps - 1) / kWarps), dim3(kThreads), smem, stream, a);
}

}  // namespace

void gemv(Half type, GemvEpilogue epilogue, const GemvArgs& a, cudaStream_t stream) {
  if (a.k % 8 != 0) throw std::runtime_error("gemv: the reduction size must be a multiple of 8");
  const bool norm = a.x_norm != nullptr;
  if (norm && a.k > 16384) throw std::runtime_error("gemv: a normalised input is limited to 16384 values");
  if (epilogue == GemvEpilogue::QkvRope && (a.head_dim % 2 || a.rows[0] % a.head_dim || a.rows[1] % a.head_dim))
    throw std::runtime_error("gemv: QkvRope needs whole heads");
  HEARTH_DISPATCH_HALF(type, T, {
    switch (epilogue) {
      case GemvEpilogue::Store:
        norm ? launch<T, GemvEpilogue::Store, true>(a, stream) : launch<T, GemvEpilogue::Store, false>(a, stream);
        break;
      case GemvEpilogue::Accumulate:
        norm ? launch<T, GemvEpilogue::Accumulate, true>(a, stream)
             : launch<T, GemvEpilogue::Accumulate, false>(a, stream);
        break;
      case GemvEpilogue::SwiGLU:
        norm ? launch<T, GemvEpilogue::SwiGLU, true>(a, stream) : launch<T, GemvEpilogue::SwiGLU, false>(a, stream);
        break;
      case GemvEpilogue::QkvRope:
        norm ? launch<T, GemvEpilogue::QkvRope, true>(a, stream)
             : launch<T, GemvEpilogue::QkvRope, false>(a, stream);
        break;
    }
  });
}

}  // namespace hearth::kernels
