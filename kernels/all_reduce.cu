#include "kernels/all_reduce.h"
#include "kernels/cuda_check.h"
#include "kernels/half_utils.cuh"
#include "kernels/pdl.cuh"
#include "kernels/rmsnorm_row.cuh"

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

// Block b of this rank meets block b of every peer: its writes so far, then its arrival flag
// on every peer; then it waits for theirs. `value` only grows from call to call on every rank.
__device__ void meet_peers(const AllReduceArgs& a, uint32_t value) {
  __syncthreads();
  if (threadIdx.x < a.n_ranks && int(threadIdx.x) != a.rank) {
    const int p = threadIdx.x;
    store_release_sys(a.flags[p] + blockIdx.x * kMaxAllReduceRanks + a.rank, value);
    const uint32_t* mine_flag = a.flags[a.rank] + blockIdx.x * kMaxAllReduceRanks + p;
    const long long start = clock64();
    while (int32_t(load_acquire_sys(mine_flag) - value) < 0) {
      if (clock64() - start > 20'000'000'000LL) __trap();  // a peer that never came: fail, not hang
    }
  }
  __syncthreads();
}

// This rank's group g of four (or fewer, at the end) from `from` into `to`: 16-byte when
// `aligned` and whole, else one at a time.
__device__ __forceinline__ void copy_group(const float* from, float* to, int64_t g, int64_t count,
                                           bool aligned) {
  if (aligned && 4 * g + 4 <= count) {
    reinterpret_cast<float4*>(to)[g] = reinterpret_cast<const float4*>(from)[g];
  } else {
    for (int64_t i = 4 * g; i < min(4 * g + 4, count); ++i) to[i] = from[i];
  }
}

// out's group g = (accumulate ? out : 0) + sum, where sum is the rank-order sum of group g.
__device__ __forceinline__ void store_group(const AllReduceArgs& a, int64_t g, float4 sum,
                                            bool aligned) {
  if (aligned && 4 * g + 4 <= a.count) {
    float4 r = sum;
    if (a.accumulate) {
      const float4 old = reinterpret_cast<const float4*>(a.out)[g];
      r = make_float4(__fadd_rn(old.x, sum.x), __fadd_rn(old.y, sum.y), __fadd_rn(old.z, sum.z),
                      __fadd_rn(old.w, sum.w));
    }
    reinterpret_cast<float4*>(a.out)[g] = r;
  } else {
    const float v[4] = {sum.x, sum.y, sum.z, sum.w};
    for (int64_t i = 4 * g; i < min(4 * g + 4, a.count); ++i)
      a.out[i] = a.accumulate ? __fadd_rn(a.out[i], v[i - 4 * g]) : v[i - 4 * g];
  }
}

// Group g summed over the ranks' staging in rank order (staging is 16-byte aligned and holds
// whole groups; lanes past `count` in the last group are never stored).
__device__ __forceinline__ float4 rank_order_sum(const AllReduceArgs& a, const float* const* src,
                                                 int64_t g) {
  float4 s = __ldcg(reinterpret_cast<const float4*>(src[0]) + g);
  for (int p = 1; p < a.n_ranks; ++p) {
    const float4 v = __ldcg(reinterpret_cast<const float4*>(src[p]) + g);
    s = make_float4(__fadd_rn(s.x, v.x), __fadd_rn(s.y, v.y), __fadd_rn(s.z, v.z),
                    __fadd_rn(s.w, v.w));
  }
  return s;
}

__global__ void __launch_bounds__(kThreads) fixed_order_all_reduce(AllReduceArgs a) {
  __shared__ uint32_t epoch_s;
  if (threadIdx.x == 0) epoch_s = a.epochs[blockIdx.x] + 1;
  __syncthreads();
  const uint32_t epoch = epoch_s;
  // Two halves alternate by epoch: a rank entering epoch e has met every peer at e-1, which each
  // entered only after its launch e-2 (the last to read this half) had finished. Barrier values
  // are 2e - 1 and 2e (one shot meets once, at 2e).
  const int64_t half = (epoch & 1u) * a.capacity;
  const float* src[kMaxAllReduceRanks];
  for (int p = 0; p < a.n_ranks; ++p) src[p] = a.staging[p] + half;
  float* mine = a.staging[a.rank] + half;

  // Block b stages (and later sums) the same groups of four elements on every rank: the grid and
  // the grouping are the same everywhere. Only how this rank reads its own partial and output
  // (16-byte or one at a time) depends on its pointers.
  const bool aligned = reinterpret_cast<uintptr_t>(a.partial) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(a.out) % 16 == 0;
  const int64_t groups = (a.count + 3) / 4;
  const int64_t stride = int64_t(a.blocks) * kThreads;
  const int64_t first = int64_t(blockIdx.x) * kThreads + threadIdx.x;

  if (!a.two_shot) {
    for (int64_t g = first; g < groups; g += stride)
      copy_group(a.partial, mine, g, a.count, aligned);
    meet_peers(a, 2 * epoch);
    for (int64_t g = first; g < groups; g += stride)
      store_group(a, g, rank_order_sum(a, src, g), aligned);
  } else {
    // Slice q holds groups [q * per, (q + 1) * per); block b handles the same offsets j in
    // every slice, in all three phases, so its two barriers cover everything it reads.
    const int64_t per = (groups + a.n_ranks - 1) / a.n_ranks;
    for (int q = 0; q < a.n_ranks; ++q)
      for (int64_t j = first; j < per && q * per + j < groups; j += stride)
        copy_group(a.partial, mine, q * per + j, a.count, aligned);
    meet_peers(a, 2 * epoch - 1);
    // Reduce-scatter: this rank's slice summed from every rank, kept in its own staging (no peer
    // reads this slice of it before the next barrier).
    for (int64_t j = first; j < per && a.rank * per + j < groups; j += stride) {
      const int64_t g = a.rank * per + j;
      reinterpret_cast<float4*>(mine)[g] = rank_order_sum(a, src, g);
    }
    meet_peers(a, 2 * epoch);
    // All-gather: slice q's sums from rank q.
    for (int q = 0; q < a.n_ranks; ++q)
      for (int64_t j = first; j < per && q * per + j < groups; j += stride) {
        const int64_t g = q * per + j;
        store_group(a, g, __ldcg(reinterpret_cast<const float4*>(src[q]) + g), aligned);
      }
  }
  if (threadIdx.x == 0) a.epochs[blockIdx.x] = epoch;
}

// One shot over whole rows, each row then normed (all_reduce.h). Block b takes rows b, b +
// blocks, ...: the same rows on every rank (the grid and the count are), so the one barrier
// covers every row it reads. An element's sum is the plain kernel's: same ranks, same order.
template <typename T, int Threads>
__global__ void __launch_bounds__(Threads) fixed_order_all_reduce_norm(AllReduceArgs a) {
  __shared__ uint32_t epoch_s;
  __shared__ float scratch[32];
  if (threadIdx.x == 0) epoch_s = a.epochs[blockIdx.x] + 1;
  __syncthreads();
  const uint32_t epoch = epoch_s;
  const int64_t half = (epoch & 1u) * a.capacity;  // as the plain kernel: the halves alternate
  const float* src[kMaxAllReduceRanks];
  for (int p = 0; p < a.n_ranks; ++p) src[p] = a.staging[p] + half;
  float* mine = a.staging[a.rank] + half;

  const int hidden = a.norm.hidden;
  const int64_t rows = a.count / hidden;
  // Whole groups of four per row, 16-byte aligned, or one element at a time: the same sums.
  const bool vec = hidden % 4 == 0 && reinterpret_cast<uintptr_t>(a.partial) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(a.out) % 16 == 0;
  const int64_t row_groups = hidden / 4;

  for (int64_t r = blockIdx.x; r < rows; r += a.blocks) {
    const int64_t base = r * hidden;
    if (vec) {
      for (int64_t j = threadIdx.x; j < row_groups; j += Threads)
        copy_group(a.partial, mine, base / 4 + j, a.count, true);
    } else {
      for (int64_t i = base + threadIdx.x; i < base + hidden; i += Threads) mine[i] = a.partial[i];
    }
  }
  // Every block meets its peers, rowless or not, so every launch's barrier spans the whole grid
  // (the halves' reuse argument in the plain kernel rests on it).
  meet_peers(a, 2 * epoch);
  // The matmul after it (launched early) may now take SMs as they free: every block runs.
  allow_dependents_early();

  T* norm_out = static_cast<T*>(a.norm.out);
  for (int64_t r = blockIdx.x; r < rows; r += a.blocks) {
    const int64_t base = r * hidden;
    if (vec) {
      for (int64_t j = threadIdx.x; j < row_groups; j += Threads)
        store_group(a, base / 4 + j, rank_order_sum(a, src, base / 4 + j), true);
    } else {
      for (int64_t i = base + threadIdx.x; i < base + hidden; i += Threads) {
        float s = __ldcg(src[0] + i);
        for (int p = 1; p < a.n_ranks; ++p) s = __fadd_rn(s, __ldcg(src[p] + i));
        a.out[i] = a.accumulate ? __fadd_rn(a.out[i], s) : s;
      }
    }
    __syncthreads();  // the row's sums, written by every thread, before any reads them
    rmsnorm_row(a.out + base, a.norm.weight, hidden, a.norm.eps, norm_out + base, scratch);
  }
  if (threadIdx.x == 0) a.epochs[blockIdx.x] = epoch;
}

template <typename T>
void launch_norm(const AllReduceArgs& a, cudaStream_t stream) {
  // The rmsnorm kernel's block size for this width, so the row's reduction order is its own.
  switch (rmsnorm_block_threads(a.norm.hidden)) {
    case 1024:
      fixed_order_all_reduce_norm<T, 1024><<<a.blocks, 1024, 0, stream>>>(a);
      break;
    case 512:
      fixed_order_all_reduce_norm<T, 512><<<a.blocks, 512, 0, stream>>>(a);
      break;
    default:
      fixed_order_all_reduce_norm<T, 128><<<a.blocks, 128, 0, stream>>>(a);
      break;
  }
}

}  // namespace

void launch_fixed_order_all_reduce(const AllReduceArgs& a, cudaStream_t stream) {
  if (a.norm.weight) {
    HEARTH_DISPATCH_HALF(a.norm.type, T, launch_norm<T>(a, stream));
  } else {
    fixed_order_all_reduce<<<a.blocks, kThreads, 0, stream>>>(a);
  }
  HEARTH_CUDA_CHECK_LAUNCH();
}

}  // namespace hearth::kernels
