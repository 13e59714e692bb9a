// Decode attention: one new query token per head over the KV cache. The context is split
// across up to `splits` blocks per KV head (more for longer contexts: each split is a whole
// number of 64-row tiles). A block streams its tiles through shared memory (double-buffered
// cp.async) and serves every query head of the GQA group from there, so each key/value row is
// read once per group, with an online softmax across tiles. The last block of a group to
// finish merges the splits in split order, so the result does not depend on scheduling.
#include <cuda_pipeline.h>

#include <algorithm>

#include "kernels/cuda_check.h"
#include "kernels/half_utils.cuh"
#include "kernels/pdl.cuh"

namespace hearth::kernels {

namespace {

constexpr int kTile = 64;
constexpr int kThreads = 256;
constexpr int kMaxGroup = 16;
constexpr int kMaxItems = 4;  // (head, dimension pair) accumulators per thread

int max_splits(int context, int n_kv_heads) {
  static int sms = [] {
    int device = 0, n = 132;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device);
    return n;
  }();
  const int tiles = (context + kTile - 1) / kTile;
  return std::max(1, std::min(tiles, 2 * sms / std::max(1, n_kv_heads)));
}

template <int kHeadDim>
constexpr int partial_stride() { return kHeadDim + 2; }  // max, sum, unnormalised output

template <typename T, int kHeadDim>
struct Smem {
  static constexpr int kPitch = kHeadDim + 8;  // padded rows: conflict-free 16-byte reads
  T k[2][kTile * kPitch];
  T v[2][kTile * kPitch];
  float q[kMaxGroup * kHeadDim];
  float p[kMaxGroup * kTile];
  float alpha[kMaxGroup];
  float m[kMaxGroup];
  float l[kMaxGroup];
  int last;
};

// Copies rows [first, end) of one tile (cache rows begin + ...) into a buffer.
template <typename T, int kHeadDim>
__device__ __forceinline__ void stage_rows(T* dst, const T* src, int first, int end) {
  constexpr int kChunks = kHeadDim / 8, kPitch = Smem<T, kHeadDim>::kPitch;
  for (int i = first * kChunks + threadIdx.x; i < end * kChunks; i += kThreads) {
    const int row = i / kChunks, c = i % kChunks;
    __pipeline_memcpy_async(dst + row * kPitch + c * 8, src + size_t(row) * kHeadDim + c * 8, 16);
  }
}

template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kThreads, 1) decode_kernel(DecodeAttentionArgs a) {
  using S = Smem<T, kHeadDim>;
  constexpr int kPairs = kHeadDim / 2;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  S& s = *reinterpret_cast<S*>(smem_raw);
  allow_dependents_early();

  const int kv_head = blockIdx.x, split = blockIdx.y, splits = gridDim.y;
  const int group = a.n_heads / a.n_kv_heads;
  // The host wrote pos before this step began, so it may be read before the wait.
  const int pos = a.pos[0], len = pos + 1;
  const int chunk = ((len + splits - 1) / splits + kTile - 1) / kTile * kTile;
  const int active = (len + chunk - 1) / chunk;
  if (split >= active) return;
  const int begin = split * chunk, end = min(len, begin + chunk);
  const size_t head_base = size_t(kv_head) * a.context * kHeadDim;
  const T* kg = static_cast<const T*>(a.k_cache) + head_base;
  const T* vg = static_cast<const T*>(a.v_cache) + head_base;

  // Rows before pos were written by earlier steps: fetch the first tile now. Row pos is this
  // step's, written by the kernel we depend on.
  const int first_end = min(end, begin + kTile);
  stage_rows<T, kHeadDim>(s.k[0], kg + size_t(begin) * kHeadDim, 0, min(first_end, pos) - begin);
  stage_rows<T, kHeadDim>(s.v[0], vg + size_t(begin) * kHeadDim, 0, min(first_end, pos) - begin);
  wait_for_producer();
  if (first_end > pos) {
    stage_rows<T, kHeadDim>(s.k[0], kg + size_t(begin) * kHeadDim, pos - begin, pos - begin + 1);
    stage_rows<T, kHeadDim>(s.v[0], vg + size_t(begin) * kHeadDim, pos - begin, pos - begin + 1);
  }
  __pipeline_commit();
  const T* qg = static_cast<const T*>(a.q) + size_t(kv_head) * group * kHeadDim;
  for (int i = threadIdx.x; i < group * kHeadDim; i += kThreads) s.q[i] = HalfTraits<T>::to_float(qg[i]) * a.scale;
  for (int g = threadIdx.x; g < group; g += kThreads) {
    s.m[g] = -INFINITY;
    s.l[g] = 0.0f;
  }

  const int items = group * kPairs;
  float acc[kMaxItems][2] = {};
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  int buf = 0;
  for (int t0 = begin; t0 < end; t0 += kTile, buf ^= 1) {
    const int rows = min(kTile, end - t0);
    if (t0 + kTile < end) {  // prefetch the next tile into the other buffer
      const int n = min(kTile, end - t0 - kTile);
      stage_rows<T, kHeadDim>(s.k[buf ^ 1], kg + size_t(t0 + kTile) * kHeadDim, 0, n);
      stage_rows<T, kHeadDim>(s.v[buf ^ 1], vg + size_t(t0 + kTile) * kHeadDim, 0, n);
      __pipeline_commit();
      __pipeline_wait_prior(1);
    } else {
      __pipeline_wait_prior(0);
    }
    __syncthreads();

    // Scores: one (head, row) pair per thread per step.
    for (int i = threadIdx.x; i < group * kTile; i += kThreads) {
      const int g = i / kTile, j = i % kTile;
      float sc = -INFINITY;
      if (j < rows) {
        const T* k = s.k[buf] + j * S::kPitch;
        const float* q = s.q + g * kHeadDim;
        float part[4] = {};  // four independent chains instead of one long one
#pragma unroll
        for (int d = 0; d < kHeadDim; d += 8) {
          const uint4 w = *reinterpret_cast<const uint4*>(k + d);
          const uint32_t parts[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float2 kv = HalfTraits<T>::unpack(parts[e]);
            part[e] += q[d + 2 * e] * kv.x + q[d + 2 * e + 1] * kv.y;
          }
        }
        sc = (part[0] + part[1]) + (part[2] + part[3]);
      }
      s.p[g * kTile + j] = sc;
    }
    __syncthreads();

    // Online softmax per head: a warp per head.
    for (int g = warp; g < group; g += kThreads / 32) {
      float* p = s.p + g * kTile;
      const float m_old = s.m[g];
      const float m_new = fmaxf(m_old, warp_max(fmaxf(p[lane], p[lane + 32])));
      const float e0 = __expf(p[lane] - m_new), e1 = __expf(p[lane + 32] - m_new);
      p[lane] = e0;
      p[lane + 32] = e1;
      const float sum = warp_sum(e0 + e1);
      if (lane == 0) {
        const float alpha = m_old == -INFINITY ? 0.0f : __expf(m_old - m_new);
        s.alpha[g] = alpha;
        s.m[g] = m_new;
        s.l[g] = s.l[g] * alpha + sum;
      }
    }
    __syncthreads();

    // Accumulate P V for this thread's (head, dimension pair) items.
#pragma unroll
    for (int it = 0; it < kMaxItems; ++it) {
      const int item = threadIdx.x + it * kThreads;
      if (item >= items) continue;  // (not break: keeps acc indices compile-time constants)
      const int g = item / kPairs, d = 2 * (item % kPairs);
      const float alpha = s.alpha[g];
      const float* p = s.p + g * kTile;
      const T* v = s.v[buf] + d;
      // Even and odd rows in separate sums: two dependency chains, loads pipelined.
      float o0 = 0.0f, o1 = 0.0f, e0 = 0.0f, e1 = 0.0f;
      int j = 0;
#pragma unroll 4
      for (; j + 1 < rows; j += 2) {
        const float2 va = HalfTraits<T>::unpack(*reinterpret_cast<const uint32_t*>(v + j * S::kPitch));
        const float2 vb = HalfTraits<T>::unpack(*reinterpret_cast<const uint32_t*>(v + (j + 1) * S::kPitch));
        o0 += p[j] * va.x;
        o1 += p[j] * va.y;
        e0 += p[j + 1] * vb.x;
        e1 += p[j + 1] * vb.y;
      }
      if (j < rows) {
        const float2 va = HalfTraits<T>::unpack(*reinterpret_cast<const uint32_t*>(v + j * S::kPitch));
        o0 += p[j] * va.x;
        o1 += p[j] * va.y;
      }
      acc[it][0] = acc[it][0] * alpha + (o0 + e0);
      acc[it][1] = acc[it][1] * alpha + (o1 + e1);
    }
    __syncthreads();  // buffers and scores are reused by the next tile
  }

  T* out = static_cast<T*>(a.out) + size_t(kv_head) * group * kHeadDim;
  if (active == 1) {  // the whole context in one block: no merge needed
#pragma unroll
    for (int it = 0; it < kMaxItems; ++it) {
      const int item = threadIdx.x + it * kThreads;
      if (item >= items) continue;
      const int g = item / kPairs, d = 2 * (item % kPairs);
      const float inv = 1.0f / s.l[g];
      out[g * kHeadDim + d] = HalfTraits<T>::from_float(acc[it][0] * inv);
      out[g * kHeadDim + d + 1] = HalfTraits<T>::from_float(acc[it][1] * inv);
    }
    return;
  }

  // This split's result, then the last split of the group to finish merges all of them.
  float* part = a.partial;
  auto slot = [&](int g, int sp) {
    return part + (size_t(kv_head * group + g) * splits + sp) * partial_stride<kHeadDim>();
  };
#pragma unroll
  for (int it = 0; it < kMaxItems; ++it) {
    const int item = threadIdx.x + it * kThreads;
    if (item >= items) continue;
    const int g = item / kPairs, d = 2 * (item % kPairs);
    slot(g, split)[2 + d] = acc[it][0];
    slot(g, split)[3 + d] = acc[it][1];
  }
  for (int g = threadIdx.x; g < group; g += kThreads) {
    slot(g, split)[0] = s.m[g];
    slot(g, split)[1] = s.l[g];
  }
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) s.last = atomicAdd(&a.counters[kv_head], 1u) == unsigned(active - 1);
  __syncthreads();
  if (!s.last) return;
  __threadfence();
  for (int i = threadIdx.x; i < group * kHeadDim; i += kThreads) {
    const int g = i / kHeadDim, d = i % kHeadDim;
    float m = -INFINITY;
    for (int sp = 0; sp < active; ++sp) m = fmaxf(m, __ldcg(slot(g, sp)));
    float l = 0.0f, o = 0.0f;
    for (int sp = 0; sp < active; ++sp) {
      const float w = __expf(__ldcg(slot(g, sp)) - m);
      l += __ldcg(slot(g, sp) + 1) * w;
      o += __ldcg(slot(g, sp) + 2 + d) * w;
    }
    out[i] = HalfTraits<T>::from_float(o / l);
  }
  if (threadIdx.x == 0) a.counters[kv_head] = 0;  // ready for the next step
}

template <typename T, int kHeadDim>
void launch(const DecodeAttentionArgs& a, cudaStream_t stream) {
  constexpr size_t smem = sizeof(Smem<T, kHeadDim>);
  static bool configured = false;  // one attribute call per instantiation
  if (!configured) {
    HEARTH_CUDA_CHECK(cudaFuncSetAttribute(decode_kernel<T, kHeadDim>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    configured = true;
  }
  launch_pdl(decode_kernel<T, kHeadDim>, dim3(a.n_kv_heads, max_splits(a.context, a.n_kv_heads)),
             dim3(kThreads), smem, stream, a);
}

}  // namespace

size_t decode_attention_scratch_floats(int n_heads, int head_dim, int context) {
  return size_t(n_heads) * max_splits(context, 1) * (head_dim + 2);
}

void attention_decode(Half type, const DecodeAttentionArgs& a, cudaStream_t stream) {
  if (a.n_heads / a.n_kv_heads > kMaxGroup || (a.n_heads / a.n_kv_heads) * a.head_dim / 2 > kMaxItems * kThreads)
    throw std::runtime_error("attention_decode: GQA groups larger than 16 are not supported");
  HEARTH_DISPATCH_HALF(type, T, {
    switch (a.head_dim) {
      case 16: launch<T, 16>(a, stream); break;
      case 32: launch<T, 32>(a, stream); break;
      case 64: launch<T, 64>(a, stream); break;
      case 128: launch<T, 128>(a, stream); break;
      default: throw std::runtime_error("attention_decode: head_dim must be 16, 32, 64 or 128");
    }
  });
}

}  // namespace hearth::kernels
