// The per-head math of the attention input, shared by qkv_rope (contiguous cache) and
// paged_kv_write (paged pool): bias, optional RMSNorm over the head (Qwen3), RoPE on the pair
// (i, i + head_dim / 2). One thread per pair: head_dim / 2 threads a head.
#pragma once

#include "kernels/half_utils.cuh"

namespace hearth::kernels {

// The pair (i, i + head_dim / 2) of one head; `head_sum` sums a value over the head's
// head_dim / 2 threads (for the norm), so a block may hold one head or several.
template <typename HeadSum>
__device__ inline float2 qkv_head_pair_at(int i, const float* src, const float* bias,
                                          const float* norm, const float* inv_freq, int head_dim,
                                          int pos, bool rotate, float eps, HeadSum head_sum) {
  const int half = head_dim / 2;
  float x0 = src[i], x1 = src[i + half];
  if (bias) {
    x0 += bias[i];
    x1 += bias[i + half];
  }
  if (norm) {
    const float ss = head_sum(x0 * x0 + x1 * x1);
    const float scale = rsqrtf(ss / float(head_dim) + eps);
    x0 = norm[i] * (x0 * scale);
    x1 = norm[i + half] * (x1 * scale);
  }
  if (rotate) {
    float s, c;
    sincosf(float(pos) * inv_freq[i], &s, &c);
    const float r0 = x0 * c - x1 * s, r1 = x1 * c + x0 * s;
    x0 = r0;
    x1 = r1;
  }
  return make_float2(x0, x1);
}

// `src`, `bias` (optional) point at this head's values; `norm` (optional) at the head-norm
// weight. One head per block: every thread of the block must call it (the norm reduces over the
// block).
__device__ inline float2 qkv_head_pair(const float* src, const float* bias, const float* norm,
                                       const float* inv_freq, int head_dim, int pos, bool rotate,
                                       float eps, float* scratch32) {
  return qkv_head_pair_at(threadIdx.x, src, bias, norm, inv_freq, head_dim, pos, rotate, eps,
                          [scratch32](float v) { return block_sum(v, scratch32); });
}

}  // namespace hearth::kernels
