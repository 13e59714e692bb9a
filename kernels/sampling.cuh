// The GPU sampler's rules (worker/engine/sampler.h) as block-level device functions, shared by the
// one-row sampler (sampling.cu) and the batched one (batch_sampling.cu): sort keys that order
// tokens by (penalised logit desc, id asc), fixed-order block reductions, the walk over the
// sorted candidates (temperature weights, top-p, min-p), the Gumbel-max pick of
// sampling_rules.h and the raw logprob.
// A block of kThreads threads serves one row; every sum has a fixed order, so a row's result
// depends on nothing but the row.
#pragma once

#include <cfloat>
#include <climits>
#include <cstdint>

#include "kernels/philox.h"
#include "kernels/sampling_rules.h"

namespace hearth::kernels::sampling {

constexpr int kThreads = 1024;

// Float bits made to sort like the floats themselves, as unsigned integers.
__device__ __forceinline__ uint32_t orderable(float v) {
  const uint32_t b = __float_as_uint(v);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float from_orderable(uint32_t b) {
  return __uint_as_float((b & 0x80000000u) ? (b & 0x7fffffffu) : ~b);
}

// Descending order of the key = descending value, then ascending id.
__device__ __forceinline__ uint64_t sort_key(float v, int id) {
  return (uint64_t(orderable(v)) << 32) | uint32_t(0xffffffffu - uint32_t(id));
}
__device__ __forceinline__ float key_value(uint64_t key) {
  return from_orderable(uint32_t(key >> 32));
}
__device__ __forceinline__ int32_t key_id(uint64_t key) {
  return int32_t(0xffffffffu - uint32_t(key));
}

// Saturating, as the host's penalised_logit: a finite logit stays finite.
__device__ __forceinline__ float penalised(float v, float penalty) {
  return fminf(fmaxf(v > 0.0f ? v / penalty : v * penalty, -FLT_MAX), FLT_MAX);
}

struct Scratch {
  double d[33];
  int i[33];
  float f[32];
  double segment_prefix[kThreads];
};

// Sum over the block in a fixed order; every thread gets the result.
__device__ inline double block_sum_double(double v, Scratch& s) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(~0u, v, o);
  __syncthreads();
  if (lane == 0) s.d[warp] = v;
  __syncthreads();
  if (warp == 0) {
    double w = lane < int(blockDim.x >> 5) ? s.d[lane] : 0.0;
    for (int o = 16; o > 0; o >>= 1) w += __shfl_xor_sync(~0u, w, o);
    if (lane == 0) s.d[32] = w;
  }
  __syncthreads();
  return s.d[32];
}

__device__ inline int block_min_int(int v, Scratch& s) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(~0u, v, o));
  __syncthreads();
  if (lane == 0) s.i[warp] = v;
  __syncthreads();
  if (warp == 0) {
    int w = lane < int(blockDim.x >> 5) ? s.i[lane] : INT_MAX;
    for (int o = 16; o > 0; o >>= 1) w = min(w, __shfl_xor_sync(~0u, w, o));
    if (lane == 0) s.i[32] = w;
  }
  __syncthreads();
  return s.i[32];
}

__device__ inline float block_max_float(float v, Scratch& s) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(~0u, v, o));
  __syncthreads();
  if ((threadIdx.x & 31) == 0) s.f[threadIdx.x >> 5] = v;
  __syncthreads();
  v = s.f[0];
  for (int w = 1; w < int(blockDim.x >> 5); ++w) v = fmaxf(v, s.f[w]);
  return v;
}

// The Gumbel noise as a call of its own: inlined into the 1024-thread walk or an unrolled scan,
// its Philox rounds would spill registers.
__device__ __noinline__ inline float gumbel_noise(uint64_t seed, uint64_t step, int32_t id) {
  return sampling_rules::gumbel(seed, step, id);
}

// The block's best (score desc, id asc) pair, in every thread; order-free, so exact.
__device__ inline int block_best(float score, int id, Scratch& s) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int o = 16; o > 0; o >>= 1) {
    const float os = __shfl_xor_sync(~0u, score, o);
    const int oi = __shfl_xor_sync(~0u, id, o);
    if (sampling_rules::beats(os, oi, score, id)) score = os, id = oi;
  }
  __syncthreads();
  if (lane == 0) s.f[warp] = score, s.i[warp] = id;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < int(blockDim.x >> 5); ++w)
      if (sampling_rules::beats(s.f[w], s.i[w], score, id)) score = s.f[w], id = s.i[w];
    s.i[32] = id;
  }
  __syncthreads();
  return s.i[32];
}

struct Rule {
  float temperature, top_p, min_p;
  uint64_t seed, step;
};

// The walk over the first n candidates sorted by key: weights exp((v - top) / T), top-p (the
// shortest prefix whose mass reaches top_p x total), min-p (drop weights under min_p x the top
// weight, which is 1), then the Gumbel-max pick among the kept.
// `total` < 0: the mass is that of the n candidates (top-k); otherwise the given mass (the whole
// vocabulary's). Returns the pick's position in `sorted`, in every thread.
__device__ inline int choose_sorted(const uint64_t* sorted, int n, double total, const Rule& r,
                                    Scratch& s) {
  const int t = threadIdx.x;
  const double inv_t = 1.0 / r.temperature;
  const float top = key_value(sorted[0]);
  auto weight = [&](int i) { return exp((double(key_value(sorted[i])) - top) * inv_t); };

  // Each thread owns one contiguous segment of the n candidates.
  const int per = (n + kThreads - 1) / kThreads;
  const int lo = min(n, t * per), hi = min(n, lo + per);
  double own = 0.0;
  for (int i = lo; i < hi; ++i) own += weight(i);
  // Exclusive prefix of segment sums, in thread order (one thread: fixed order).
  s.segment_prefix[t] = own;
  __syncthreads();
  if (t == 0) {
    double run = 0.0;
    for (int i = 0; i < kThreads; ++i) {
      const double v = s.segment_prefix[i];
      s.segment_prefix[i] = run;
      run += v;
    }
    s.d[32] = run;
  }
  __syncthreads();
  if (total < 0.0) total = s.d[32];

  int kept = n;
  if (r.top_p < 1.0f) {
    int first = INT_MAX;
    double cum = s.segment_prefix[t];
    for (int i = lo; i < hi; ++i) {
      cum += weight(i);
      if (cum >= r.top_p * total) {
        first = i + 1;
        break;
      }
    }
    kept = min(kept, block_min_int(first, s));
  }
  if (r.min_p > 0.0f) {
    int first = INT_MAX;
    for (int i = max(lo, 1); i < hi; ++i)
      if (weight(i) < double(r.min_p)) {
        first = i;
        break;
      }
    kept = min(kept, block_min_int(first, s));
  }
  // Gumbel-max over the kept prefix: the highest pick_score, lowest id among equals.
  float best_score = -INFINITY;
  int best = INT_MAX;
  for (int i = lo; i < min(hi, kept); ++i) {
    const int32_t id = key_id(sorted[i]);
    const float scaled = sampling_rules::scaled_logit(key_value(sorted[i]), top, r.temperature);
    const float score = HEARTH_SR_ADD(scaled, gumbel_noise(r.seed, r.step, id));
    if (sampling_rules::beats(score, id, best_score, best)) best_score = score, best = id;
  }
  best = block_best(best_score, best, s);
  // Its position in `sorted`, which the callers read the token from.
  int at = INT_MAX;
  for (int i = lo; i < min(hi, kept); ++i)
    if (key_id(sorted[i]) == best) at = i;
  at = block_min_int(at, s);
  // No score beat -inf (NaN or infinite logits): the last kept, as before, whose logprob the
  // caller finds non-finite and refuses; never a position past the list.
  return at == INT_MAX ? max(kept - 1, 0) : at;
}

// log-softmax of the raw logits at `token`, in every thread.
__device__ inline float raw_logprob(const float* logits, int vocab, int token, Scratch& s) {
  float m = -INFINITY;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) m = fmaxf(m, logits[i]);
  m = block_max_float(m, s);
  double z = 0.0;
  // A logit that is not finite makes the logprob NaN, which the host checks and reports.
  for (int i = threadIdx.x; i < vocab; i += blockDim.x)
    z += isfinite(logits[i]) ? exp(double(logits[i]) - m) : double(NAN);
  z = block_sum_double(z, s);
  return float(double(logits[token]) - m - log(z));
}

}  // namespace hearth::kernels::sampling
