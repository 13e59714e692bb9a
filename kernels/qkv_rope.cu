#include "kernels/cuda_check.h"
#include "kernels/half_utils.cuh"
#include "kernels/qkv_head.cuh"

namespace hearth::kernels {

namespace {

// One block per (token, head) over q heads, then k heads, then v heads; thread i owns the
// RoPE pair (i, i + head_dim/2).
template <typename T>
__global__ void qkv_rope_kernel(QkvRopeArgs a) {
  __shared__ float scratch[32];
  const int t = blockIdx.x, head = blockIdx.y, i = threadIdx.x, half = a.head_dim / 2;
  const int q_dim = a.n_heads * a.head_dim, kv_dim = a.n_kv_heads * a.head_dim;
  const bool is_q = head < a.n_heads, is_k = !is_q && head < a.n_heads + a.n_kv_heads;
  const int h = is_q ? head : is_k ? head - a.n_heads : head - a.n_heads - a.n_kv_heads;
  const float* src = is_q ? a.q + int64_t(t) * q_dim : (is_k ? a.k : a.v) + int64_t(t) * kv_dim;
  const float* bias = is_q ? a.bq : is_k ? a.bk : a.bv;
  const float* norm = is_q ? a.q_norm : is_k ? a.k_norm : nullptr;
  const int base = h * a.head_dim;
  const int pos = a.start_pos[0] + t;
  const float2 x = qkv_head_pair(src + base, bias ? bias + base : nullptr, norm, a.inv_freq,
                                 a.head_dim, pos, is_q || is_k, a.eps, scratch);
  T* dst;
  if (is_q) {
    dst = static_cast<T*>(a.q_out) + int64_t(t) * q_dim + base;
  } else {
    T* cache = static_cast<T*>(is_k ? a.k_cache : a.v_cache);
    dst = cache + (int64_t(h) * a.context + pos) * a.head_dim;
  }
  dst[i] = HalfTraits<T>::from_float(x.x);
  dst[i + half] = HalfTraits<T>::from_float(x.y);
}

}  // namespace

void qkv_rope(Half type, const QkvRopeArgs& args, cudaStream_t stream) {
  const dim3 grid(args.n, args.n_heads + 2 * args.n_kv_heads);
  HEARTH_DISPATCH_HALF(type, T, qkv_rope_kernel<T><<<grid, args.head_dim / 2, 0, stream>>>(args));
  HEARTH_CUDA_CHECK_LAUNCH();
}

}  // namespace hearth::kernels
