// Sampling on the GPU with the host sampler's rules (worker/sampler.h): repetition penalty,
// temperature, top-k, top-p, min-p and one Philox uniform per step. Every token is sorted by
// (penalised logit desc, id asc) with a radix sort of 64-bit keys, then one block walks the
// sorted list: weights, the kept prefix, and the pick, with sums in a fixed order so the
// result does not depend on scheduling. A logit that is not finite makes the logprob NaN, which
// the host checks.
#include <cfloat>

#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda_check.h"
#include "kernels/half_utils.cuh"
#include "kernels/philox.h"

namespace hearth::kernels {

namespace {

constexpr int kThreads = 1024;

// Float bits made to sort like the floats themselves, as unsigned integers.
__device__ __forceinline__ uint32_t orderable(float v) {
  const uint32_t b = __float_as_uint(v);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float from_orderable(uint32_t b) {
  return __uint_as_float((b & 0x80000000u) ? (b & 0x7fffffffu) : ~b);
}

__global__ void keys_kernel(const float* logits, int vocab, const uint8_t* seen, float penalty,
                            uint64_t* keys) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < vocab; i += gridDim.x * blockDim.x) {
    float v = logits[i];
    // Saturating, as the host's penalised_logit: a finite logit stays finite.
    if (seen && seen[i]) v = fminf(fmaxf(v > 0.0f ? v / penalty : v * penalty, -FLT_MAX), FLT_MAX);
    // Descending order of the key = descending logit, then ascending id.
    keys[i] = (uint64_t(orderable(v)) << 32) | uint32_t(0xffffffffu - uint32_t(i));
  }
}

// Sum over the block in a fixed order; every thread gets the result.
__device__ double block_sum_double(double v, double* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(~0u, v, o);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    double w = lane < int(blockDim.x >> 5) ? scratch[lane] : 0.0;
    for (int o = 16; o > 0; o >>= 1) w += __shfl_xor_sync(~0u, w, o);
    if (lane == 0) scratch[32] = w;
  }
  __syncthreads();
  return scratch[32];
}

__device__ int block_min_int(int v, int* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(~0u, v, o));
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    int w = lane < int(blockDim.x >> 5) ? scratch[lane] : INT_MAX;
    for (int o = 16; o > 0; o >>= 1) w = min(w, __shfl_xor_sync(~0u, w, o));
    if (lane == 0) scratch[32] = w;
  }
  __syncthreads();
  return scratch[32];
}

__global__ void __launch_bounds__(kThreads) choose_kernel(SampleArgs a, const uint64_t* sorted) {
  __shared__ double dscratch[33];
  __shared__ int iscratch[33];
  __shared__ double segment_prefix[kThreads];
  const int t = threadIdx.x;
  const int n = a.top_k > 0 ? min(a.top_k, a.vocab) : a.vocab;
  const double inv_t = 1.0 / a.temperature;
  const float top = from_orderable(uint32_t(sorted[0] >> 32));
  auto weight = [&](int i) {
    return exp((double(from_orderable(uint32_t(sorted[i] >> 32))) - top) * inv_t);
  };

  // Each thread owns one contiguous segment of the first n sorted tokens.
  const int per = (n + kThreads - 1) / kThreads;
  const int lo = min(n, t * per), hi = min(n, lo + per);
  double own = 0.0;
  for (int i = lo; i < hi; ++i) own += weight(i);
  // Exclusive prefix of segment sums, in thread order (one thread: fixed order).
  segment_prefix[t] = own;
  __syncthreads();
  if (t == 0) {
    double run = 0.0;
    for (int i = 0; i < kThreads; ++i) {
      const double s = segment_prefix[i];
      segment_prefix[i] = run;
      run += s;
    }
    dscratch[32] = run;
  }
  __syncthreads();
  const double total = dscratch[32];

  // top-p: the shortest prefix whose mass reaches top_p x total.
  int kept = n;
  if (a.top_p < 1.0f) {
    int first = INT_MAX;
    double cum = segment_prefix[t];
    for (int i = lo; i < hi; ++i) {
      cum += weight(i);
      if (cum >= a.top_p * total) {
        first = i + 1;
        break;
      }
    }
    kept = min(kept, block_min_int(first, iscratch));
  }
  // min-p: tokens below min_p x the top weight (which is 1) are dropped.
  if (a.min_p > 0.0f) {
    int first = INT_MAX;
    for (int i = max(lo, 1); i < hi; ++i)
      if (weight(i) < double(a.min_p)) {
        first = i;
        break;
      }
    kept = min(kept, block_min_int(first, iscratch));
  }
  // Mass of the kept prefix, then the first token whose cumulative weight passes u x mass.
  double part = 0.0;
  for (int i = lo; i < min(hi, kept); ++i) part += weight(i);
  const double kept_mass = block_sum_double(part, dscratch);
  const double target = philox_uniform(a.seed, a.step, 0) * kept_mass;
  int pick = INT_MAX;
  {
    double cum = segment_prefix[t];
    for (int i = lo; i < min(hi, kept); ++i) {
      cum += weight(i);
      if (cum > target) {
        pick = i;
        break;
      }
    }
  }
  pick = block_min_int(pick, iscratch);
  if (pick == INT_MAX) pick = kept - 1;

  // log-softmax of the raw logits at the chosen token.
  const int32_t token = int32_t(0xffffffffu - uint32_t(sorted[pick]));
  float m = -INFINITY;
  for (int i = t; i < a.vocab; i += kThreads) m = fmaxf(m, a.logits[i]);
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(~0u, m, o));
  __shared__ float fm[32];
  if ((t & 31) == 0) fm[t >> 5] = m;
  __syncthreads();
  m = fm[0];
  for (int w = 1; w < kThreads / 32; ++w) m = fmaxf(m, fm[w]);
  double z = 0.0;
  for (int i = t; i < a.vocab; i += kThreads)
    z += isfinite(a.logits[i]) ? exp(double(a.logits[i]) - m) : double(NAN);
  z = block_sum_double(z, dscratch);
  if (t == 0) {
    *a.token = token;
    *a.logprob = float(double(a.logits[token]) - m - log(z));
  }
}

size_t sort_temp_bytes(int vocab) {
  size_t bytes = 0;
  cub::DeviceRadixSort::SortKeysDescending(nullptr, bytes, static_cast<const uint64_t*>(nullptr),
                                           static_cast<uint64_t*>(nullptr), vocab);
  return bytes;
}

}  // namespace

size_t sample_scratch_bytes(int vocab) {
  return 2 * size_t(vocab) * sizeof(uint64_t) + sort_temp_bytes(vocab) + 256;
}

void sample(const SampleArgs& a, cudaStream_t stream) {
  if (!(a.temperature > 0.0f))
    throw std::runtime_error("sample: greedy choices go through argmax_logprob");
  uint64_t* keys = static_cast<uint64_t*>(a.scratch);
  uint64_t* sorted = keys + a.vocab;
  // cub wants its temporary storage 256-byte aligned; the scratch size leaves room for that.
  void* temp = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(sorted + a.vocab) + 255) &
                                       ~uintptr_t(255));
  size_t temp_bytes = sort_temp_bytes(a.vocab);
  keys_kernel<<<(a.vocab + 255) / 256, 256, 0, stream>>>(a.logits, a.vocab, a.seen, a.penalty,
                                                         keys);
  HEARTH_CUDA_CHECK_LAUNCH();
  HEARTH_CUDA_CHECK(cub::DeviceRadixSort::SortKeysDescending(temp, temp_bytes, keys, sorted,
                                                             a.vocab, 0, 64, stream));
  choose_kernel<<<1, kThreads, 0, stream>>>(a, sorted);
  HEARTH_CUDA_CHECK_LAUNCH();
}

}  // namespace hearth::kernels
