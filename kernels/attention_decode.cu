// Decode attention: one new query token per head over the KV cache. The context is split
// across up to `splits` blocks per KV head (one wave: more splits for longer contexts), each
// split a whole number of 128-row tiles. A block streams its tiles through shared memory
// (double-buffered cp.async) and serves every query head of the GQA group from there, so each
// key/value row is read once per group; an online softmax carries across tiles. Within a
// tile, 512 threads share the work: a score per (head, row), then each (head, dimension pair)
// output split over row partitions and added up at the end in a fixed order. When a context
// needs several splits, the last block of a group to finish merges them in split order, so
// the result does not depend on scheduling.
#include <cuda_pipeline.h>

#include <algorithm>

#include "kernels/cuda_check.h"
#include "kernels/device_sm_count.h"
#include "kernels/half_utils.cuh"
#include "kernels/head_dim_dispatch.h"
#include "kernels/pdl.cuh"

namespace hearth::kernels {

namespace {

constexpr int kTile = 128;
constexpr int kThreads = 512;
constexpr int kMaxGroup = 16;

int max_splits(int context, int n_kv_heads) {
  const int tiles = (context + kTile - 1) / kTile;
  return std::max(1, std::min(tiles, device_sm_count() / std::max(1, n_kv_heads)));
}

template <int kHeadDim>
constexpr int partial_stride() {
  return kHeadDim + 2;
}  // max, sum, unnormalised output

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
  float2 sums[kThreads];  // row-partition sums, added up at the end
  int last;
};

// Copies rows [first, end) of one tile into a buffer.
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
  // The host (or the previous step) wrote pos before this step began: readable before the wait.
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
  for (int i = threadIdx.x; i < group * kHeadDim; i += kThreads)
    s.q[i] = HalfTraits<T>::to_float(qg[i]) * a.scale;
  for (int g = threadIdx.x; g < group; g += kThreads) {
    s.m[g] = -INFINITY;
    s.l[g] = 0.0f;
  }

  // Output work: (head, dimension pair) items, each split over `parts` row partitions.
  const int items = group * kPairs;
  const int parts = max(1, kThreads / items);
  const int item = threadIdx.x % items, part = threadIdx.x / items;
  const bool owns = threadIdx.x < items * parts;
  const int og = item / kPairs, od = 2 * (item % kPairs);
  float acc0 = 0.0f, acc1 = 0.0f;

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
        float part4[4] = {};  // four independent chains instead of one long one
#pragma unroll
        for (int d = 0; d < kHeadDim; d += 8) {
          const uint4 w = *reinterpret_cast<const uint4*>(k + d);
          const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float2 kv = HalfTraits<T>::unpack(words[e]);
            part4[e] += q[d + 2 * e] * kv.x + q[d + 2 * e + 1] * kv.y;
          }
        }
        sc = (part4[0] + part4[1]) + (part4[2] + part4[3]);
      }
      s.p[g * kTile + j] = sc;
    }
    __syncthreads();

    // Online softmax per head: a warp per head, four rows per lane.
    for (int g = warp; g < group; g += kThreads / 32) {
      float* p = s.p + g * kTile;
      float v[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) v[r] = p[lane + 32 * r];
      const float m_old = s.m[g];
      const float m_new = fmaxf(m_old, warp_max(fmaxf(fmaxf(v[0], v[1]), fmaxf(v[2], v[3]))));
      float sum = 0.0f;
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const float e = __expf(v[r] - m_new);
        p[lane + 32 * r] = e;
        sum += e;
      }
      sum = warp_sum(sum);
      if (lane == 0) {
        const float alpha = m_old == -INFINITY ? 0.0f : __expf(m_old - m_new);
        s.alpha[g] = alpha;
        s.m[g] = m_new;
        s.l[g] = s.l[g] * alpha + sum;
      }
    }
    __syncthreads();

    // P V for this thread's item over its partition of the tile's rows.
    if (owns) {
      const float* p = s.p + og * kTile;
      const T* v = s.v[buf] + od;
      float o0 = 0.0f, o1 = 0.0f, e0 = 0.0f, e1 = 0.0f;  // even and odd rows: two chains
      int j = part;
#pragma unroll 4
      for (; j + parts < rows; j += 2 * parts) {
        const float2 va =
            HalfTraits<T>::unpack(*reinterpret_cast<const uint32_t*>(v + j * S::kPitch));
        const float2 vb =
            HalfTraits<T>::unpack(*reinterpret_cast<const uint32_t*>(v + (j + parts) * S::kPitch));
        o0 += p[j] * va.x;
        o1 += p[j] * va.y;
        e0 += p[j + parts] * vb.x;
        e1 += p[j + parts] * vb.y;
      }
      if (j < rows) {
        const float2 va =
            HalfTraits<T>::unpack(*reinterpret_cast<const uint32_t*>(v + j * S::kPitch));
        o0 += p[j] * va.x;
        o1 += p[j] * va.y;
      }
      const float alpha = s.alpha[og];
      acc0 = acc0 * alpha + (o0 + e0);
      acc1 = acc1 * alpha + (o1 + e1);
    }
    __syncthreads();  // buffers and scores are reused by the next tile
  }

  // Add up the row partitions, in partition order.
  s.sums[threadIdx.x] = make_float2(acc0, acc1);
  __syncthreads();
  if (owns && part == 0) {
    for (int r = 1; r < parts; ++r) {
      const float2 o = s.sums[r * items + item];
      acc0 += o.x;
      acc1 += o.y;
    }
  }

  T* out = static_cast<T*>(a.out) + size_t(kv_head) * group * kHeadDim;
  if (active == 1) {  // the whole context in one block: no merge needed
    if (owns && part == 0) {
      const float inv = 1.0f / s.l[og];
      out[og * kHeadDim + od] = HalfTraits<T>::from_float(acc0 * inv);
      out[og * kHeadDim + od + 1] = HalfTraits<T>::from_float(acc1 * inv);
    }
    return;
  }

  // This split's result, then the last split of the group to finish merges all of them.
  auto slot = [&](int g, int sp) {
    return a.partial + (size_t(kv_head * group + g) * splits + sp) * partial_stride<kHeadDim>();
  };
  if (owns && part == 0) {
    slot(og, split)[2 + od] = acc0;
    slot(og, split)[3 + od] = acc1;
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
  const int group = a.n_heads / a.n_kv_heads;
  if (group > kMaxGroup || group * a.head_dim / 2 > kThreads)
    throw std::runtime_error(
        "attention_decode: GQA groups larger than 16 (8 at head_dim 128) are not supported");
  HEARTH_DISPATCH_HALF(type, T, {
    dispatch_head_dim(a.head_dim, "attention_decode",
                      [&](auto d) { launch<T, decltype(d)::value>(a, stream); });
  });
}

}  // namespace hearth::kernels
