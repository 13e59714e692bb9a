// Prefill attention, flash style: one block takes 64 queries of one head and walks the keys
// in tiles of 64, computing S = QK^T and O += PV with m16n8k16 tensor-core MMAs and keeping a
// running max and sum per row (online softmax), so the n x n score matrix never exists. Four
// warps own 16 query rows each. Tiles sit in shared memory with an XOR swizzle on 16-byte
// chunks so ldmatrix reads are free of bank conflicts. The sums' order is fixed.
#include <cuda_pipeline.h>

#include "kernels/cuda_check.h"
#include "kernels/half_utils.cuh"
#include "kernels/head_dim_dispatch.h"
#include "kernels/mma.cuh"

namespace hearth::kernels {

namespace {

constexpr int kRowsQ = 64;  // queries per block
constexpr int kRowsK = 64;  // keys per tile
constexpr int kWarps = 4;

template <int kHeadDim>
struct Tile {
  static constexpr int kChunks = kHeadDim / 8;  // 16-byte chunks per row
  static constexpr int kSwizzle = kChunks < 8 ? kChunks : 8;
  // Element offset of (row, chunk) in a swizzled tile.
  __device__ static int at(int row, int chunk) {
    return (row * kChunks + (chunk ^ (row & (kSwizzle - 1)))) * 8;
  }
};

// Copies `rows` rows (of a [*, row_stride] array starting at `src`) into a swizzled tile;
// rows past `valid` are zero-filled.
template <int kHeadDim, typename T>
__device__ __forceinline__ void load_tile(T* tile, const T* src, int64_t row_stride, int valid) {
  using L = Tile<kHeadDim>;
  for (int i = threadIdx.x; i < kRowsQ * L::kChunks; i += kWarps * 32) {
    const int row = i / L::kChunks, c = i % L::kChunks;
    T* dst = tile + L::at(row, c);
    if (row < valid)
      __pipeline_memcpy_async(dst, src + row * row_stride + c * 8, 16);
    else
      *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
  }
}

template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kWarps * 32) prefill_kernel(PrefillAttentionArgs a) {
  using L = Tile<kHeadDim>;
  constexpr int kDSteps = kHeadDim / 16;  // k-steps of S = QK^T
  constexpr int kDTiles = kHeadDim / 8;   // n-tiles of O
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* qs = reinterpret_cast<T*>(smem_raw);
  T* ks = qs + kRowsQ * kHeadDim;
  T* vs = ks + kRowsK * kHeadDim;

  const int q_block = blockIdx.x, head = blockIdx.y;
  const int group = a.n_heads / a.n_kv_heads, kv_head = head / group;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int q_dim = a.n_heads * kHeadDim;
  const int q0 = q_block * kRowsQ;  // first query of this block, relative to start_pos
  const int kv_len = a.start_pos + a.n;
  const T* kbase = static_cast<const T*>(a.k_cache) + int64_t(kv_head) * a.context * kHeadDim;
  const T* vbase = static_cast<const T*>(a.v_cache) + int64_t(kv_head) * a.context * kHeadDim;

  load_tile<kHeadDim>(qs, static_cast<const T*>(a.q) + int64_t(q0) * q_dim + head * kHeadDim, q_dim,
                      a.n - q0);
  __pipeline_commit();
  __pipeline_wait_prior(0);
  __syncthreads();

  // This warp's 16 query rows as A fragments, one per k-step.
  uint32_t qf[kDSteps][4];
  {
    const int row = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
    for (int s = 0; s < kDSteps; ++s) ldmatrix_x4(qf[s], qs + L::at(row, 2 * s + (lane >> 4)));
  }

  // Rows this thread holds in accumulators: r0 = lane/4 and r0 + 8 of the warp's 16.
  const int row_a = q0 + warp * 16 + (lane >> 2);
  const int pos_a = a.start_pos + row_a, pos_b = pos_a + 8;
  const float scale_log2 = a.scale * 1.4426950408889634f;
  float o[kDTiles][4] = {};
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f;

  const int last_key = min(a.start_pos + q0 + kRowsQ, kv_len) - 1;  // causal bound of the block
  for (int k0 = 0; k0 <= last_key; k0 += kRowsK) {
    __syncthreads();  // the previous tile is no longer read
    load_tile<kHeadDim>(ks, kbase + int64_t(k0) * kHeadDim, kHeadDim, kv_len - k0);
    load_tile<kHeadDim>(vs, vbase + int64_t(k0) * kHeadDim, kHeadDim, kv_len - k0);
    __pipeline_commit();
    __pipeline_wait_prior(0);
    __syncthreads();

    // S = Q K^T for 16 rows x 64 keys: 8 n-tiles of 8 keys.
    float s[8][4] = {};
#pragma unroll
    for (int st = 0; st < kDSteps; ++st) {
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t b[4];
        const int mi = lane >> 3;
        ldmatrix_x4(b, ks + L::at(np * 16 + (lane & 7) + (mi >> 1) * 8, 2 * st + (mi & 1)));
        mma_16816<T>(s[2 * np], qf[st], b[0], b[1]);
        mma_16816<T>(s[2 * np + 1], qf[st], b[2], b[3]);
      }
    }

    // Mask (causal and past the end), scale to log2 units, running max.
    float tile_max_a = -INFINITY, tile_max_b = -INFINITY;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = k0 + j * 8 + 2 * (lane & 3) + (e & 1);
        const int pos = e < 2 ? pos_a : pos_b;
        const float v = (key <= pos && key < kv_len) ? s[j][e] * scale_log2 : -INFINITY;
        s[j][e] = v;
        if (e < 2)
          tile_max_a = fmaxf(tile_max_a, v);
        else
          tile_max_b = fmaxf(tile_max_b, v);
      }
    }
    for (int off = 1; off <= 2; off <<= 1) {
      tile_max_a = fmaxf(tile_max_a, __shfl_xor_sync(0xffffffffu, tile_max_a, off));
      tile_max_b = fmaxf(tile_max_b, __shfl_xor_sync(0xffffffffu, tile_max_b, off));
    }
    const float new_a = fmaxf(m_a, tile_max_a), new_b = fmaxf(m_b, tile_max_b);
    // A row with nothing visible yet keeps m = -inf; its factors must stay finite.
    const float alpha_a = new_a == -INFINITY ? 1.0f : exp2f(m_a - new_a);
    const float alpha_b = new_b == -INFINITY ? 1.0f : exp2f(m_b - new_b);
    m_a = new_a;
    m_b = new_b;
    float sum_a = 0.0f, sum_b = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      s[j][0] = m_a == -INFINITY ? 0.0f : exp2f(s[j][0] - m_a);
      s[j][1] = m_a == -INFINITY ? 0.0f : exp2f(s[j][1] - m_a);
      s[j][2] = m_b == -INFINITY ? 0.0f : exp2f(s[j][2] - m_b);
      s[j][3] = m_b == -INFINITY ? 0.0f : exp2f(s[j][3] - m_b);
      sum_a += s[j][0] + s[j][1];
      sum_b += s[j][2] + s[j][3];
    }
    l_a = l_a * alpha_a + sum_a;
    l_b = l_b * alpha_b + sum_b;
#pragma unroll
    for (int t = 0; t < kDTiles; ++t) {
      o[t][0] *= alpha_a;
      o[t][1] *= alpha_a;
      o[t][2] *= alpha_b;
      o[t][3] *= alpha_b;
    }

    // O += P V: P's accumulators are already laid out as A fragments (16 keys per k-step).
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const uint32_t p[4] = {pack_half2<T>(s[2 * kk][0], s[2 * kk][1]),
                             pack_half2<T>(s[2 * kk][2], s[2 * kk][3]),
                             pack_half2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             pack_half2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int dp = 0; dp < kDTiles / 2; ++dp) {
        uint32_t b[4];
        const int mi = lane >> 3;
        ldmatrix_x4_trans(b, vs + L::at(kk * 16 + (lane & 7) + (mi & 1) * 8, 2 * dp + (mi >> 1)));
        mma_16816<T>(o[2 * dp], p, b[0], b[1]);
        mma_16816<T>(o[2 * dp + 1], p, b[2], b[3]);
      }
    }
  }

  // Row sums are spread over the 4 lanes of a quad.
  for (int off = 1; off <= 2; off <<= 1) {
    l_a += __shfl_xor_sync(0xffffffffu, l_a, off);
    l_b += __shfl_xor_sync(0xffffffffu, l_b, off);
  }
  const float inv_a = l_a > 0 ? 1.0f / l_a : 0.0f, inv_b = l_b > 0 ? 1.0f / l_b : 0.0f;
  T* out = static_cast<T*>(a.out);
#pragma unroll
  for (int t = 0; t < kDTiles; ++t) {
    const int col = head * kHeadDim + t * 8 + 2 * (lane & 3);
    if (row_a < a.n)
      *reinterpret_cast<uint32_t*>(out + int64_t(row_a) * q_dim + col) =
          pack_half2<T>(o[t][0] * inv_a, o[t][1] * inv_a);
    if (row_a + 8 < a.n)
      *reinterpret_cast<uint32_t*>(out + int64_t(row_a + 8) * q_dim + col) =
          pack_half2<T>(o[t][2] * inv_b, o[t][3] * inv_b);
  }
}

template <typename T, int kHeadDim>
void launch(const PrefillAttentionArgs& a, cudaStream_t stream) {
  constexpr size_t smem = size_t(kRowsQ + 2 * kRowsK) * kHeadDim * sizeof(T);
  static bool configured = false;
  if (!configured) {
    HEARTH_CUDA_CHECK(cudaFuncSetAttribute(prefill_kernel<T, kHeadDim>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    configured = true;
  }
  const dim3 grid((a.n + kRowsQ - 1) / kRowsQ, a.n_heads);
  prefill_kernel<T, kHeadDim><<<grid, kWarps * 32, smem, stream>>>(a);
  HEARTH_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool attention_prefill_supports(int head_dim) {
  return head_dim_supported(head_dim);
}

void attention_prefill(Half type, const PrefillAttentionArgs& a, cudaStream_t stream) {
  HEARTH_DISPATCH_HALF(type, T, {
    dispatch_head_dim(a.head_dim, "attention_prefill",
                      [&](auto d) { launch<T, decltype(d)::value>(a, stream); });
  });
}

}  // namespace hearth::kernels
