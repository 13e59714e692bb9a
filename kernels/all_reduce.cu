#include "kernels/all_reduce.h"
#include "kernels/cuda_check.h"

namespace hearth::kernels {

namespace {

constexpr int kThreads = 512;

__device__ __forceinline__ void store_release_sys(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ uint32_t load_acquire_sys(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// One element of the rank-order sum: partials added 0, 1, ..., N-1, then to what out held.
__device__ __forceinline__ float reduce_one(const AllReduceArgs& a, const float* const* src,
                                            int64_t i, float old) {
  float s = __ldcg(src[0] + i);
  for (int p = 1; p < a.n_ranks; ++p) s = __fadd_rn(s, __ldcg(src[p] + i));
  return a.accumulate ? __fadd_rn(old, s) : s;
}

// Four at once (16-byte loads from each peer), each lane the same arithmetic as reduce_one.
__device__ __forceinline__ float4 reduce_four(const AllReduceArgs& a, const float* const* src,
                                              int64_t i, float4 old) {
  float4 s = __ldcg(reinterpret_cast<const float4*>(src[0]) + i);
  for (int p = 1; p < a.n_ranks; ++p) {
    const float4 v = __ldcg(reinterpret_cast<const float4*>(src[p]) + i);
    s = make_float4(__fadd_rn(s.x, v.x), __fadd_rn(s.y, v.y), __fadd_rn(s.z, v.z),
                    __fadd_rn(s.w, v.w));
  }
  if (!a.accumulate) return s;
  return make_float4(__fadd_rn(old.x, s.x), __fadd_rn(old.y, s.y), __fadd_rn(old.z, s.z),
                     __fadd_rn(old.w, s.w));
}

__global__ void __launch_bounds__(kThreads) fixed_order_all_reduce(AllReduceArgs a) {
  __shared__ uint32_t epoch_s;
  if (threadIdx.x == 0) epoch_s = a.epochs[blockIdx.x] + 1;
  __syncthreads();
  const uint32_t epoch = epoch_s;
  // Two halves alternate by epoch: a rank entering epoch e has met every peer at e-1, which each
  // entered only after its launch e-2 (the last to read this half) had finished.
  const int64_t half = (epoch & 1u) * a.capacity;
  const float* src[kMaxAllReduceRanks];
  for (int p = 0; p < a.n_ranks; ++p) src[p] = a.staging[p] + half;

  // Block b stages (and later sums) the same groups of four elements on every rank: the grid and
  // the grouping are the same everywhere. Only how this rank reads its own partial and output
  // (16-byte or one at a time) depends on its pointers.
  const bool aligned = reinterpret_cast<uintptr_t>(a.partial) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(a.out) % 16 == 0;
  const int64_t groups = (a.count + 3) / 4;
  const int64_t stride = int64_t(a.blocks) * kThreads;
  const int64_t first = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  float* mine = a.staging[a.rank] + half;
  for (int64_t g = first; g < groups; g += stride) {
    if (aligned && 4 * g + 4 <= a.count) {
      reinterpret_cast<float4*>(mine)[g] = reinterpret_cast<const float4*>(a.partial)[g];
    } else {
      for (int64_t i = 4 * g; i < min(4 * g + 4, a.count); ++i) mine[i] = a.partial[i];
    }
  }

  // The barrier: this block's writes, then its arrival flag on every peer; then wait for theirs.
  __syncthreads();
  if (threadIdx.x < a.n_ranks && int(threadIdx.x) != a.rank) {
    const int p = threadIdx.x;
    store_release_sys(a.flags[p] + blockIdx.x * kMaxAllReduceRanks + a.rank, epoch);
    const uint32_t* mine_flag = a.flags[a.rank] + blockIdx.x * kMaxAllReduceRanks + p;
    const long long start = clock64();
    while (int32_t(load_acquire_sys(mine_flag) - epoch) < 0) {
      if (clock64() - start > 20'000'000'000LL) __trap();  // a peer that never came: fail, not hang
    }
  }
  __syncthreads();

  for (int64_t g = first; g < groups; g += stride) {
    if (4 * g + 4 <= a.count) {
      float4 old{};
      if (a.accumulate)
        old = aligned
                  ? reinterpret_cast<const float4*>(a.out)[g]
                  : make_float4(a.out[4 * g], a.out[4 * g + 1], a.out[4 * g + 2], a.out[4 * g + 3]);
      const float4 r = reduce_four(a, src, g, old);
      if (aligned) {
        reinterpret_cast<float4*>(a.out)[g] = r;
      } else {
        a.out[4 * g] = r.x, a.out[4 * g + 1] = r.y, a.out[4 * g + 2] = r.z, a.out[4 * g + 3] = r.w;
      }
    } else {
      for (int64_t i = 4 * g; i < a.count; ++i)
        a.out[i] = reduce_one(a, src, i, a.accumulate ? a.out[i] : 0.0f);
    }
  }
  if (threadIdx.x == 0) a.epochs[blockIdx.x] = epoch;
}

}  // namespace

void launch_fixed_order_all_reduce(const AllReduceArgs& a, cudaStream_t stream) {
  fixed_order_all_reduce<<<a.blocks, kThreads, 0, stream>>>(a);
  HEARTH_CUDA_CHECK_LAUNCH();
}

}  // namespace hearth::kernels
