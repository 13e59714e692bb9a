// Batch-1 GEMV for decode. A warp owns kN dot products (one row; gate and up of one row for
// SwiGLU; the two rows of a RoPE pair for QkvRope) and walks the reduction dimension in
// 16-byte chunks with 8 weight loads in flight per thread, double-buffered in registers: the
// next loads are issued before the current chunks are used. Weights bypass L1 (read once).
// Before waiting for the previous kernel (programmatic dependent launch) each warp already
// issues its first weight loads, so the weight stream never stops between kernels.
// Sums run in a fixed order (per lane over its chunks, then a fixed butterfly), so results
// are bit-reproducible.
#include "kernels/cuda_check.h"
#include "kernels/device_sm_count.h"
#include "kernels/half_utils.cuh"
#include "kernels/pdl.cuh"

namespace hearth::kernels {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kLoadsInFlight = 8;
constexpr uint32_t kPrefetchBytes = 8192;  // per warp, ahead of the dependency wait

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
  auto row = [&](int m, int r) {
    return static_cast<const char*>(a.w[m]) + size_t(r) * a.k * elem;
  };
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
__global__ void __launch_bounds__(kThreads) gemv_kernel(GemvArgs a, int split) {
  constexpr int kN = (E == GemvEpilogue::SwiGLU || E == GemvEpilogue::QkvRope) ? 2 : 1;
  constexpr int kU = kLoadsInFlight / kN;  // chunks per lane per step
  extern __shared__ float4 smem_x[];
  __shared__ float partial[kWarps][kN];
  float* xs = reinterpret_cast<float*>(smem_x);
  allow_dependents_early();

  // `split` warps share one item, each taking every split-th 32-chunk stripe of its rows;
  // their sums are added in warp order.
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int part = warp % split, stride = 32 * split;
  const int chunks = a.k / 8;
  Item it;
  const bool active = item_for<E, kN>(a, blockIdx.x * (kWarps / split) + warp / split, it);

  // First loads go out before waiting for the producer of x: weights do not depend on it.
  uint4 cur[kN][kU], next[kN][kU];
  auto load = [&](uint4(&w)[kN][kU], int base) {
#pragma unroll
    for (int u = 0; u < kU; ++u)
#pragma unroll
      for (int n = 0; n < kN; ++n)
        if (active && base + stride * u < chunks)
          w[n][u] = load_stream(static_cast<const uint4*>(it.rows[n]) + base + stride * u);
  };
  const int first = part * 32 + lane;
  load(cur, first);
  // And the start of this warp's stripes into L2, so the whole weight stream keeps going while
  // the previous kernel (often a short, latency-bound one) finishes.
  if (a.prefetch && active && lane < kN) {
    // The group consumes its rows front to back; part p fetches the p-th piece of the front.
    const uint32_t piece = min(uint32_t(a.k) * 2 / split, kPrefetchBytes / kN) / 16 * 16;
    if (piece >= 16)
      prefetch_l2(static_cast<const char*>(it.rows[lane]) + size_t(part) * piece, piece);
  }

  wait_for_producer();
  if constexpr (kNorm) {
    __shared__ float scratch[32];
    float ss = 0.0f;
    for (int i = threadIdx.x; i < a.k; i += kThreads) ss += a.x_norm[i] * a.x_norm[i];
    ss = block_sum(ss, scratch);
    const float scale = rsqrtf(ss / float(a.k) + a.eps);
    for (int i = threadIdx.x; i < a.k; i += kThreads)
      xs[i] = a.norm_weight[i] * (a.x_norm[i] * scale);
    __syncthreads();
  }

  float acc[kN] = {};
  if (active) {
    for (int base = first; base < chunks; base += stride * kU) {
      load(next, base + stride * kU);
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        if (base + stride * u >= chunks) break;
        float xv[8];
        load_x<T, kNorm>(xs, static_cast<const T*>(a.x), base + stride * u, xv);
#pragma unroll
        for (int n = 0; n < kN; ++n) acc[n] += dot8<T>(cur[n][u], xv);
      }
#pragma unroll
      for (int u = 0; u < kU; ++u)
#pragma unroll
        for (int n = 0; n < kN; ++n) cur[n][u] = next[n][u];
    }
  }
#pragma unroll
  for (int n = 0; n < kN; ++n) acc[n] = warp_sum(acc[n]);
  if (split > 1) {
    if (lane == 0)
#pragma unroll
      for (int n = 0; n < kN; ++n) partial[warp][n] = acc[n];
    __syncthreads();
    if (part != 0) return;
#pragma unroll
    for (int n = 0; n < kN; ++n) {
      acc[n] = partial[warp][n];
      for (int p = 1; p < split; ++p) acc[n] += partial[warp + p][n];
    }
  }
  if (active && lane == 0) epilogue<T, E>(a, it, acc);
}

template <GemvEpilogue E>
int items_of(const GemvArgs& a) {
  if (E == GemvEpilogue::QkvRope) return (a.rows[0] + a.rows[1] + a.rows[2]) / 2;
  if (E == GemvEpilogue::SwiGLU) return a.rows[0];
  return a.rows[0] + a.rows[1] + a.rows[2];
}

// Warps per item. A row split over more warps makes a deeper grid (a short last wave leaves
// bandwidth unused), but each lane must keep 8 loads in flight (K >= 2048 per warp), and a
// normalised input costs each block a prologue, so those stay at one warp per row.
// (Measured on an H100, 8B shapes: o_proj best at 2, down_proj at 4, the rest at 1.)
int auto_split(int items, int k, bool norm) {
  if (norm) return 1;
  const int want = device_sm_count() * 16 * 4;  // about four waves of 16 resident warps per SM
  int split = 1;
  while (split < kWarps && items * split < want && k >= 2048 * 2 * split) split *= 2;
  return split;
}

template <typename T, GemvEpilogue E, bool kNorm>
void launch(const GemvArgs& a, cudaStream_t stream) {
  const int items = items_of<E>(a);
  const int split = a.split > 0 ? a.split : auto_split(items, a.k, kNorm);
  const int per_block = kWarps / split;
  const size_t smem = kNorm ? size_t(a.k) * sizeof(float) : 0;
  static bool configured = false;
  if (kNorm && !configured) {
    HEARTH_CUDA_CHECK(cudaFuncSetAttribute(gemv_kernel<T, E, kNorm>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024));
    configured = true;
  }
  launch_pdl(gemv_kernel<T, E, kNorm>, dim3((items + per_block - 1) / per_block), dim3(kThreads),
             smem, stream, a, split);
}

}  // namespace

void gemv(Half type, GemvEpilogue epilogue, const GemvArgs& a, cudaStream_t stream) {
  if (a.k % 8 != 0) throw std::runtime_error("gemv: the reduction size must be a multiple of 8");
  if (a.split != 0 && a.split != 1 && a.split != 2 && a.split != 4 && a.split != 8)
    throw std::runtime_error("gemv: split must be 0 (auto), 1, 2, 4 or 8");
  const bool norm = a.x_norm != nullptr;
  if (norm && a.k > 16384)
    throw std::runtime_error("gemv: a normalised input is limited to 16384 values");
  if (epilogue == GemvEpilogue::QkvRope &&
      (a.head_dim % 2 || a.rows[0] % a.head_dim || a.rows[1] % a.head_dim))
    throw std::runtime_error("gemv: QkvRope needs whole heads");
  HEARTH_DISPATCH_HALF(type, T, {
    switch (epilogue) {
      case GemvEpilogue::Store:
        norm ? launch<T, GemvEpilogue::Store, true>(a, stream)
             : launch<T, GemvEpilogue::Store, false>(a, stream);
        break;
      case GemvEpilogue::Accumulate:
        norm ? launch<T, GemvEpilogue::Accumulate, true>(a, stream)
             : launch<T, GemvEpilogue::Accumulate, false>(a, stream);
        break;
      case GemvEpilogue::SwiGLU:
        norm ? launch<T, GemvEpilogue::SwiGLU, true>(a, stream)
             : launch<T, GemvEpilogue::SwiGLU, false>(a, stream);
        break;
      case GemvEpilogue::QkvRope:
        norm ? launch<T, GemvEpilogue::QkvRope, true>(a, stream)
             : launch<T, GemvEpilogue::QkvRope, false>(a, stream);
        break;
    }
  });
}

}  // namespace hearth::kernels
