// Decode attention: one new query token per head over the KV cache. The context is cut into
// fixed chunks of kChunk positions; one block takes one (kv head, chunk), stages the chunk's
// keys and values in shared memory once and serves every query head of the GQA group from
// there. Per-chunk results (max, sum, unnormalised output) are merged by a second kernel in
// chunk order, so the result does not depend on scheduling.
#include <cuda_pipeline.h>

#include "kernels/cuda_check.h"
#include "kernels/half_utils.cuh"

namespace hearth::kernels {

namespace {

constexpr int kChunk = 64;
constexpr int kThreads = 256;
constexpr int kMaxGroup = 16;

int chunks_for(int context) { return (context + kChunk - 1) / kChunk; }

// Scratch per (head, chunk): [max, sum, out[head_dim]].
template <int kHeadDim>
constexpr int partial_stride() { return kHeadDim + 2; }

template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kThreads) decode_chunk_kernel(DecodeAttentionArgs a) {
  constexpr int kRowChunks = kHeadDim / 8;          // 16-byte pieces per row
  constexpr int kPitch = kHeadDim + 8;              // padded row, in elements: no bank conflicts
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* ks = reinterpret_cast<T*>(smem_raw);
  T* vs = ks + kChunk * kPitch;
  float* qs = reinterpret_cast<float*>(vs + kChunk * kPitch);  // [group][head_dim]
  float* ps = qs + kMaxGroup * kHeadDim;                        // [group][kChunk]

  const int kv_head = blockIdx.x, chunk = blockIdx.y;
  const int pos = a.pos[0];
  const int begin = chunk * kChunk;
  if (begin > pos) return;  // beyond the current length; the merge ignores this chunk
  const int len = min(kChunk, pos + 1 - begin);
  const int group = a.n_heads / a.n_kv_heads;

  // Stage keys and values of this chunk (cp.async: all loads in flight at once).
  const T* kg = static_cast<const T*>(a.k_cache) + (int64_t(kv_head) * a.context + begin) * kHeadDim;
  const T* vg = static_cast<const T*>(a.v_cache) + (int64_t(kv_head) * a.context + begin) * kHeadDim;
  for (int i = threadIdx.x; i < len * kRowChunks; i += kThreads) {
    const int row = i / kRowChunks, c = i % kRowChunks;
    __pipeline_memcpy_async(ks + row * kPitch + c * 8, kg + int64_t(row) * kHeadDim + c * 8, 16);
    __pipeline_memcpy_async(vs + row * kPitch + c * 8, vg + int64_t(row) * kHeadDim + c * 8, 16);
  }
  __pipeline_commit();
  const T* qg = static_cast<const T*>(a.q) + int64_t(kv_head) * group * kHeadDim;
  for (int i = threadIdx.x; i < group * kHeadDim; i += kThreads)
    qs[i] = HalfTraits<T>::to_float(qg[i]) * a.scale;
  __pipeline_wait_prior(0);
  __syncthreads();

  // Scores: one (head, position) pair per thread.
  for (int i = threadIdx.x; i < group * kChunk; i += kThreads) {
    const int g = i / kChunk, j = i % kChunk;
    float s = -INFINITY;
    if (j < len) {
      s = 0.0f;
      const T* k = ks + j * kPitch;
      const float* q = qs + g * kHeadDim;
#pragma unroll
      for (int d = 0; d < kHeadDim; d += 8) {
        const uint4 w = *reinterpret_cast<const uint4*>(k + d);  // 16 bytes: conflict-free
        const uint32_t parts[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float2 kv = HalfTraits<T>::unpack(parts[e]);
          s += q[d + 2 * e] * kv.x;
          s += q[d + 2 * e + 1] * kv.y;
        }
      }
    }
    ps[g * kChunk + j] = s;
  }
  __syncthreads();

  // Softmax pieces per head: one warp per head, lanes over positions.
  float* part = a.partial;
  const int chunks = gridDim.y;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int g = warp; g < group; g += kThreads / 32) {
    float m = -INFINITY;
    for (int j = lane; j < kChunk; j += 32) m = fmaxf(m, ps[g * kChunk + j]);
    m = warp_max(m);
    float l = 0.0f;
    for (int j = lane; j < kChunk; j += 32) {
      const float p = j < len ? __expf(ps[g * kChunk + j] - m) : 0.0f;
      ps[g * kChunk + j] = p;
      l += p;
    }
    l = warp_sum(l);
    if (lane == 0) {
      float* dst = part + (int64_t(kv_head * group + g) * chunks + chunk) * partial_stride<kHeadDim>();
      dst[0] = m;
      dst[1] = l;
    }
  }
  __syncthreads();

  // Unnormalised output: one (head, dimension pair) per thread.
  for (int i = threadIdx.x; i < group * (kHeadDim / 2); i += kThreads) {
    const int g = i / (kHeadDim / 2), d = 2 * (i % (kHeadDim / 2));
    float o0 = 0.0f, o1 = 0.0f;
    const float* p = ps + g * kChunk;
    for (int j = 0; j < len; ++j) {
      const float2 v = HalfTraits<T>::unpack(*reinterpret_cast<const uint32_t*>(vs + j * kPitch + d));
      o0 += p[j] * v.x;
      o1 += p[j] * v.y;
    }
    float* dst = part + (int64_t(kv_head * group + g) * chunks + chunk) * partial_stride<kHeadDim>();
    dst[2 + d] = o0;
    dst[3 + d] = o1;
  }
}

// Merges the chunks of one head in chunk order.
template <typename T, int kHeadDim>
__global__ void decode_merge_kernel(DecodeAttentionArgs a, int chunks) {
  const int head = blockIdx.x;
  const int active = a.pos[0] / kChunk + 1;
  const float* part = a.partial + int64_t(head) * chunks * partial_stride<kHeadDim>();
  float m = -INFINITY;
  for (int c = 0; c < active; ++c) m = fmaxf(m, part[c * partial_stride<kHeadDim>()]);
  float l = 0.0f;
  for (int c = 0; c < active; ++c) {
    const float* p = part + c * partial_stride<kHeadDim>();
    l += p[1] * __expf(p[0] - m);
  }
  for (int d = threadIdx.x; d < kHeadDim; d += blockDim.x) {
    float o = 0.0f;
    for (int c = 0; c < active; ++c) {
      const float* p = part + c * partial_stride<kHeadDim>();
      o += p[2 + d] * __expf(p[0] - m);
    }
    static_cast<T*>(a.out)[int64_t(head) * kHeadDim + d] = HalfTraits<T>::from_float(o / l);
  }
}

template <typename T, int kHeadDim>
void launch(const DecodeAttentionArgs& a, cudaStream_t stream) {
  constexpr size_t smem = 2 * kChunk * (kHeadDim + 8) * sizeof(T) +
                          kMaxGroup * kHeadDim * sizeof(float) + kMaxGroup * kChunk * sizeof(float);
  static bool configured = false;  // one attribute call per instantiation
  if (!configured) {
    HEARTH_CUDA_CHECK(cudaFuncSetAttribute(decode_chunk_kernel<T, kHeadDim>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    configured = true;
  }
  const int chunks = chunks_for(a.context);
  decode_chunk_kernel<T, kHeadDim><<<dim3(a.n_kv_heads, chunks), kThreads, smem, stream>>>(a);
  HEARTH_CUDA_CHECK_LAUNCH();
  decode_merge_kernel<T, kHeadDim><<<a.n_heads, kHeadDim, 0, stream>>>(a, chunks);
  HEARTH_CUDA_CHECK_LAUNCH();
}

}  // namespace

size_t decode_attention_scratch_floats(int n_heads, int head_dim, int context) {
  return size_t(n_heads) * chunks_for(context) * (head_dim + 2);
}

void attention_decode(Half type, const DecodeAttentionArgs& a, cudaStream_t stream) {
  if (a.n_heads / a.n_kv_heads > kMaxGroup)
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
