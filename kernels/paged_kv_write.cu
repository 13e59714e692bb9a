// The attention input of a batched step: per token, the q/k/v heads get their bias, head norm
// and RoPE at the token's own position (qkv_head.cuh, the same math as qkv_rope); q goes out as
// 16-bit and k/v land in the paged pool at the token's slot.
#include <stdexcept>
#include <string>

#include "kernels/batch_ops.h"
#include "kernels/cuda_check.h"
#include "kernels/device_sm_count.h"
#include "kernels/fp8_e4m3.h"
#include "kernels/half_utils.cuh"
#include "kernels/kv_write_shape_rule.h"
#include "kernels/paged_kv_write_shape.h"
#include "kernels/pdl.cuh"
#include "kernels/qkv_head.cuh"

namespace hearth::kernels {

namespace {

// A block holds `heads` heads of head_dim / 2 threads each; with several, a head's threads are
// whole warps. Its reductions run in block_sum's order whatever the block holds: each warp's
// butterfly, then the head's warp partials (lane w holding its warp w's, the rest 0) through one
// more butterfly, so a head's bits do not depend on how many heads share its block.
struct HeadGroup {
  int i;           // this thread's pair in its head
  int g;           // its head in the block
  int first_warp;  // the head's first warp in the block
  int warps;       // the head's warps

  template <typename Op>
  __device__ float reduce(float v, float* scratch32, Op op) const {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();  // scratch may still be in use by the head norm
    if (lane == 0) scratch32[warp] = v;
    __syncthreads();
    v = lane < warps ? scratch32[first_warp + lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
  }
};

__device__ inline HeadGroup head_group(int head_dim) {
  const int half = head_dim / 2, g = threadIdx.x / half;
  const bool one = blockDim.x == unsigned(half);
  return {int(threadIdx.x) - g * half, g, one ? 0 : g * (half >> 5),
          one ? (half + 31) >> 5 : half >> 5};
}

// fp8 KV: the row's scale (its largest magnitude / 448, 1 when all are zero) and codes of x /
// scale, the rule of worker/engine/kv_fp8.h in the same fp32 operations.
__device__ inline void write_fp8_row(const PagedKvWriteArgs& a, const HeadGroup& hg, bool is_k,
                                     int h, int slot, float2 x, float* scratch) {
  const int i = hg.i, half = a.head_dim / 2;
  // The largest magnitude (exact in any order).
  const float amax = hg.reduce(fmaxf(fabsf(x.x), fabsf(x.y)), scratch,
                               [](float u, float w) { return fmaxf(u, w); });
  const float scale = amax > 0.0f ? __fdiv_rn(amax, 448.0f) : 1.0f;
  const int block = slot / a.block_size, offset = slot % a.block_size;
  uint8_t* base =
      static_cast<uint8_t*>(is_k ? a.k_pool : a.v_pool) + int64_t(block) * a.block_stride;
  uint8_t* row = base + (int64_t(h) * a.block_size + offset) * a.head_dim;
  row[i] = encode_e4m3(__fdiv_rn(x.x, scale));
  row[i + half] = encode_e4m3(__fdiv_rn(x.y, scale));
  if (i == 0) reinterpret_cast<float*>(base + a.kv_scale_offset)[h * a.block_size + offset] = scale;
}

// One block per (token, group of heads) over q heads, then k heads, then v heads; a group never
// mixes q, k and v (its size divides n_heads and n_kv_heads), so every branch below is uniform
// over the block.
template <typename T>
__global__ void paged_kv_write_kernel(PagedKvWriteArgs a) {
  __shared__ float scratch[32];
  allow_dependents_early();
  wait_for_producer();
  const HeadGroup hg = head_group(a.head_dim);
  const int heads = blockDim.x / (a.head_dim / 2);
  const int t = blockIdx.x, head = blockIdx.y * heads + hg.g, i = hg.i, half = a.head_dim / 2;
  const int q_dim = a.n_heads * a.head_dim, kv_dim = a.n_kv_heads * a.head_dim;
  const bool is_q = head < a.n_heads, is_k = !is_q && head < a.n_heads + a.n_kv_heads;
  const int h = is_q ? head : is_k ? head - a.n_heads : head - a.n_heads - a.n_kv_heads;
  // The slot is read with the rest, not before it: a padding k/v head still computes its row
  // (never stored) so that its loads do not wait on this one.
  const int slot = a.slot[t];
  const float* src = is_q ? a.q + int64_t(t) * q_dim : (is_k ? a.k : a.v) + int64_t(t) * kv_dim;
  const float* bias = is_q ? a.bq : is_k ? a.bk : a.bv;
  const float* norm = is_q ? a.q_norm : is_k ? a.k_norm : nullptr;
  const int base = h * a.head_dim;
  const float2 x =
      qkv_head_pair_at(i, src + base, bias ? bias + base : nullptr, norm, a.inv_freq, a.head_dim,
                       a.pos[t], is_q || is_k, a.eps, [&hg, scratch_ = scratch](float v) {
                         return hg.reduce(v, scratch_, [](float u, float w) { return u + w; });
                       });
  if (!is_q && slot < 0) return;  // padding: no cache row (uniform over the block)
  if (!is_q && a.fp8_kv) {        // uniform over the block
    write_fp8_row(a, hg, is_k, h, slot, x, scratch);
    return;
  }
  T* dst;
  if (is_q) {
    dst = static_cast<T*>(a.q_out) + int64_t(t) * q_dim + base;
  } else {
    const int block = slot / a.block_size, offset = slot % a.block_size;
    T* pool = static_cast<T*>(is_k ? a.k_pool : a.v_pool);
    dst =
        pool + int64_t(block) * a.block_stride + (int64_t(h) * a.block_size + offset) * a.head_dim;
  }
  dst[i] = HalfTraits<T>::from_float(x.x);
  dst[i + half] = HalfTraits<T>::from_float(x.y);
}

}  // namespace

void paged_kv_write(Half type, const PagedKvWriteArgs& args, cudaStream_t stream) {
  paged_kv_write_shaped(type, args, 0, stream);
}

void paged_kv_write_shaped(Half type, const PagedKvWriteArgs& args, int heads_per_block,
                           cudaStream_t stream) {
  PagedKvWriteArgs a = args;
  const int64_t packed = int64_t(a.n_kv_heads) * a.block_size * a.head_dim;
  // fp8: a block's scales follow its codes unless placed elsewhere.
  const int64_t scales = a.fp8_kv ? int64_t(a.n_kv_heads) * a.block_size * 4 : 0;
  if (a.fp8_kv && a.kv_scale_offset == 0) a.kv_scale_offset = packed;
  if (a.block_stride == 0) a.block_stride = packed + scales;
  auto fail = [](const std::string& what) {
    throw std::invalid_argument("paged_kv_write: " + what);
  };
  if (a.num_tokens < 0) fail("num_tokens is negative");
  if (a.num_tokens == 0) return;
  if (a.head_dim < 2 || a.head_dim % 2 != 0 || a.head_dim > 2048)
    fail("head_dim must be even and at most 2048, not " + std::to_string(a.head_dim));
  if (a.n_heads < 1 || a.n_kv_heads < 1 || a.block_size < 1)
    fail("n_heads, n_kv_heads and block_size must be positive");
  if (a.fp8_kv && (a.kv_scale_offset < packed || a.kv_scale_offset % 4 != 0 ||
                   a.block_stride < a.kv_scale_offset + scales))
    fail("fp8 KV: kv_scale_offset " + std::to_string(a.kv_scale_offset) +
         " must follow a block's codes (" + std::to_string(packed) +
         "), be a multiple of 4 and leave the scales inside block_stride");
  if (a.block_stride < packed || a.block_stride % 8 != 0)
    fail("block_stride " + std::to_string(a.block_stride) + " must hold a block (" +
         std::to_string(packed) + ") and be a multiple of 8");
  if (!a.q || !a.k || !a.v || !a.inv_freq || !a.pos || !a.slot || !a.q_out || !a.k_pool ||
      !a.v_pool)
    fail("q, k, v, inv_freq, pos, slot, q_out and the pools are required");
  const int half = a.head_dim / 2, all_heads = a.n_heads + 2 * a.n_kv_heads;
  int heads = heads_per_block;
  if (heads == 0) {
    heads = kv_write_shape::automatic(a.num_tokens, a.n_heads, a.n_kv_heads, a.head_dim,
                                      device_sm_count());
  } else if (!kv_write_shape::allowed(heads, a.n_heads, a.n_kv_heads, a.head_dim)) {
    fail("heads_per_block " + std::to_string(heads) +
         " must divide n_heads and n_kv_heads, fit 1024 threads and, above 1, have "
         "head_dim a multiple of 64");
  }
  const dim3 grid(a.num_tokens, all_heads / heads);
  HEARTH_DISPATCH_HALF(
      type, T, launch_pdl(paged_kv_write_kernel<T>, grid, dim3(heads * half), 0, stream, a));
}

}  // namespace hearth::kernels
