// Batched sampling: the host sampler's rules (worker/engine/sampler.h) for R rows with their own
// settings, all rows in one launch, one block per row: the row's token edits (logit_bias,
// penalties) become a bitmap in shared memory, the adjusted logits' maximum is found (and the
// raw logits' maximum and mass, for the logprob), the top_logprobs by selection (a radix select
// of the N-th key, then the few survivors ordered), and the token itself: the greedy argmax, or
// the Gumbel-max pick over the survivors of top-k (a radix select of the k-th key), top-p (a
// radix select by mass of the nucleus' last key, on integer weights so a mass is exact in any
// order) and min-p. Nothing is sorted and no scratch is needed.
// Rows never share a block or a reduction, so each row's result is independent of the batch.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/batch_ops.h"
#include "kernels/cuda_check.h"
#include "kernels/sampling.cuh"

namespace hearth::kernels {

namespace {

using namespace sampling;

constexpr int kPrepareThreads = 512;  // double-precision weights: registers, not threads
constexpr int kSelectPool = 512;      // a select finishes in shared memory below this many keys

struct Pass {
  const float* logits;
  int vocab;
  const SampleRowParams* params;
  const int* edit_offsets;
  const sampling_rules::TokenEdit* edits;
  int32_t* tokens;
  float* logprobs;
  int32_t* top_tokens;
  float* top_logprobs;
};

__device__ bool greedy_row(const SampleRowParams& q) {
  return q.temperature <= 0.0f || q.top_k == 1;
}

// Calls f(i, raw, in) for every token of the row with four loads in flight per thread (16 bytes
// each where the row's length allows), the same number of calls in every lane of a warp: `in`
// is false past the row's end, so f may use warp-wide collectives (the loops test j0 - threadIdx.x,
// the same in every lane). The histograms and gathers that use it are order-free (integer sums,
// sets of keys).
template <typename F>
__device__ __forceinline__ void for_each_logit_uniform(const float* row, int vocab, F&& f) {
  constexpr int kStride = kPrepareThreads, kInFlight = 4;
  if (vocab % 4 == 0) {
    const float4* row4 = reinterpret_cast<const float4*>(row);
    const int n4 = vocab / 4;
    for (int j0 = threadIdx.x; j0 - int(threadIdx.x) < n4; j0 += kInFlight * kStride) {
      float4 x[kInFlight];
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) {
        const int j = j0 + u * kStride;
        x[u] = j < n4 ? row4[j] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) {
        const int j = j0 + u * kStride;
        const bool in = j < n4;
        f(4 * j, x[u].x, in);
        f(4 * j + 1, x[u].y, in);
        f(4 * j + 2, x[u].z, in);
        f(4 * j + 3, x[u].w, in);
      }
    }
  } else {
    for (int i0 = threadIdx.x; i0 - int(threadIdx.x) < vocab; i0 += kInFlight * kStride) {
      float x[kInFlight];
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) {
        const int i = i0 + u * kStride;
        x[u] = i < vocab ? row[i] : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) f(i0 + u * kStride, x[u], i0 + u * kStride < vocab);
    }
  }
}

// The k-th largest (1-based) of `vocab` distinct 64-bit keys: a most significant digit first
// radix select over 8-bit digits. Keys are sort_key()s, so the k-th key is one token, and the
// keys >= it are exactly the first k tokens by (value desc, id asc). Once the digit's bucket
// holds at most kSelectPool keys, they are gathered into `pool` and ranked there: usually
// after two passes over the row instead of eight.
struct SelectShared {
  unsigned hist[256];
  uint32_t choice[3];
  int count;
  uint64_t pool[kSelectPool];
  uint64_t result;
};
template <typename Adjust>
__device__ uint64_t kth_largest(const float* row, int vocab, const Adjust& adjust, int k,
                                SelectShared& sh) {
  const int lane = threadIdx.x & 31;
  uint64_t prefix = 0, mask = 0;
  int remaining = k;
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += kPrepareThreads) sh.hist[i] = 0;
    __syncthreads();
    for_each_logit_uniform(row, vocab, [&](int i, float raw, bool in) {
      const uint64_t u = in ? sort_key(adjust(i, raw), i) : 0;
      const int digit = in && (u & mask) == prefix ? int(u >> shift & 255) : 256;
      // Past the first digit most warps hold no key of the bucket.
      if (__ballot_sync(~0u, digit < 256) == 0) return;
      // Lanes with the same digit add once: logits crowd a few digits.
      const unsigned peers = __match_any_sync(~0u, digit);
      if (digit < 256 && lane == __ffs(peers) - 1) atomicAdd(&sh.hist[digit], __popc(peers));
    });
    __syncthreads();
    if (threadIdx.x == 0) {
      unsigned above = 0;
      int d = 255;
      for (; d > 0 && above + sh.hist[d] < unsigned(remaining); --d) above += sh.hist[d];
      sh.choice[0] = uint32_t(d);
      sh.choice[1] = uint32_t(remaining) - above;
      sh.choice[2] = sh.hist[d];
      sh.count = 0;
    }
    __syncthreads();
    prefix |= uint64_t(sh.choice[0]) << shift;
    mask |= uint64_t(0xff) << shift;
    remaining = int(sh.choice[1]);
    const int in_bucket = int(sh.choice[2]);
    __syncthreads();  // choice is rewritten in the next round
    if (shift > 0 && in_bucket <= kSelectPool) {
      for_each_logit_uniform(row, vocab, [&](int i, float raw, bool in) {
        if (!in) return;
        const uint64_t u = sort_key(adjust(i, raw), i);
        if ((u & mask) == prefix) sh.pool[atomicAdd(&sh.count, 1)] = u;
      });
      __syncthreads();
      // Distinct keys: exactly one has remaining - 1 keys above it.
      for (int j = threadIdx.x; j < in_bucket; j += kPrepareThreads) {
        const uint64_t u = sh.pool[j];
        int above = 0;
        for (int m = 0; m < in_bucket; ++m) above += sh.pool[m] > u;
        if (above == remaining - 1) sh.result = u;
      }
      __syncthreads();
      const uint64_t result = sh.result;
      __syncthreads();  // the pool and result are reused by the next select
      return result;
    }
  }
  return prefix;
}

// Adds one token and its weight `w` to bucket `digit` (256: none) of `count` and `mass`, one
// shared atomic per distinct digit of the warp rather than one per lane: logits crowd a few
// digits, and 32 lanes adding to one shared word serialise.
// Integer sums in any order are the same sum, so the buckets hold exactly what per-lane adds
// gave. Weights are below 2^54 (nucleus weights are at most about 2^39): two 27-bit halves of
// 32 lanes each sum within 32 bits. Every lane of the warp calls it.
__device__ __forceinline__ void warp_bucket_add(int digit, unsigned long long w, unsigned* count,
                                                unsigned long long* mass) {
  // Past the first digit most warps hold no token of the bucket: a ballot is cheaper than a match.
  if (__ballot_sync(~0u, digit < 256) == 0) return;
  const unsigned peers = __match_any_sync(~0u, digit);
  if (digit >= 256) return;
  // Each group of peers reduces among itself (its own mask; groups are disjoint).
  const unsigned lo = __reduce_add_sync(peers, unsigned(w & 0x7ffffffu));
  const unsigned hi = __reduce_add_sync(peers, unsigned(w >> 27));
  if ((threadIdx.x & 31) == unsigned(__ffs(peers) - 1)) {
    atomicAdd(&count[digit], unsigned(__popc(peers)));
    const unsigned long long sum = (static_cast<unsigned long long>(hi) << 27) + lo;
    if (sum) atomicAdd(&mass[digit], sum);
  }
}

// top-p's nucleus: the least key K among keys >= `floor` whose keys >= K hold at least
// nucleus_need(top_p) of those keys' integer mass (sampling_rules::nucleus_weight), by a most
// significant digit first select whose buckets count mass; integer sums, so atomics are exact.
// As kth_largest, it finishes in shared memory once a bucket holds at most kSelectPool keys.
struct NucleusShared {
  unsigned long long mass[256];
  unsigned count[256];
  unsigned long long choice[3];
  int n;
  uint64_t pool[kSelectPool];
  unsigned long long pool_mass[kSelectPool];
  uint64_t result;
};
template <typename Adjust>
__device__ uint64_t nucleus_least(const float* row, int vocab, const Adjust& adjust, float top,
                                  float temperature, uint64_t floor, float top_p,
                                  NucleusShared& sh) {
  uint64_t prefix = 0, mask = 0;
  unsigned long long remaining = 0;
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += kPrepareThreads) sh.mass[i] = 0, sh.count[i] = 0;
    __syncthreads();
    // Whole warps every call: the bucket adds are warp-wide.
    for_each_logit_uniform(row, vocab, [&](int i, float raw, bool in) {
      int digit = 256;
      unsigned long long w = 0;
      if (in) {
        const float v = adjust(i, raw);
        const uint64_t u = sort_key(v, i);
        if (u >= floor && (u & mask) == prefix) {
          digit = int(u >> shift & 255);
          w = sampling_rules::nucleus_weight(v, top, temperature);
        }
      }
      warp_bucket_add(digit, w, sh.count, sh.mass);
    });
    __syncthreads();
    if (threadIdx.x == 0) {
      if (shift == 56) {
        unsigned long long total = 0;
        for (int d = 0; d < 256; ++d) total += sh.mass[d];
        remaining = sampling_rules::nucleus_need(total, top_p);
      } else {
        remaining = sh.choice[1];
      }
      unsigned long long above = 0;
      int d = 255;
      for (; d > 0 && above + sh.mass[d] < remaining; --d) above += sh.mass[d];
      sh.choice[0] = unsigned(d);
      sh.choice[1] = remaining - above;
      sh.choice[2] = sh.count[d];
      sh.n = 0;
    }
    __syncthreads();
    prefix |= uint64_t(sh.choice[0]) << shift;
    mask |= uint64_t(0xff) << shift;
    remaining = sh.choice[1];
    const int in_bucket = int(sh.choice[2]);
    if (shift > 0 && in_bucket <= kSelectPool) {
      __syncthreads();  // every thread has read choice
      for_each_logit_uniform(row, vocab, [&](int i, float raw, bool in) {
        if (!in) return;
        const float v = adjust(i, raw);
        const uint64_t u = sort_key(v, i);
        if (u < floor || (u & mask) != prefix) return;
        const int at = atomicAdd(&sh.n, 1);
        sh.pool[at] = u;
        sh.pool_mass[at] = sampling_rules::nucleus_weight(v, top, temperature);
      });
      if (threadIdx.x == 0) sh.result = prefix;
      __syncthreads();
      // The one key with less than `remaining` mass above it and at least that much from it
      // down (distinct keys; its own weight is > 0).
      for (int j = threadIdx.x; j < in_bucket; j += kPrepareThreads) {
        const uint64_t u = sh.pool[j];
        unsigned long long above = 0;
        for (int m = 0; m < in_bucket; ++m) above += sh.pool[m] > u ? sh.pool_mass[m] : 0ull;
        if (above < remaining && above + sh.pool_mass[j] >= remaining) sh.result = u;
      }
      __syncthreads();
      const uint64_t result = sh.result;
      __syncthreads();  // the pool and result are reused by the next select
      return result;
    }
    __syncthreads();  // choice is rewritten in the next round
  }
  return prefix;
}

// The edit of token t among the row's edits (ids ascending): a binary search, taken only for
// tokens whose bit is set.
__device__ __forceinline__ const sampling_rules::TokenEdit& find_edit(
    const sampling_rules::TokenEdit* e, int n, int t) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (e[mid].token < t)
      lo = mid + 1;
    else
      hi = mid;
  }
  return e[lo];
}

// Calls f(i, x, n) for tokens i .. i + n - 1 of the row, in a fixed order per thread: i a
// multiple of 4 and n = 4 (their logits in x) where the row's length is, with 16-byte loads,
// four in flight per thread; else one token a call (n = 1, its logit in x.x). (Eight in flight,
// predicated, measured slower for both passes that use it: 91 -> 98 us greedy, 312 -> 432 us
// with temperature, 256 rows of 128,256 on an H200.)
template <typename F>
__device__ __forceinline__ void for_each_logit_group(const float* row, int vocab, F&& f) {
  constexpr int kStride = kPrepareThreads;
  if (vocab % 4 == 0) {
    const float4* row4 = reinterpret_cast<const float4*>(row);
    const int n4 = vocab / 4;
    int j = threadIdx.x;
    for (; j + 3 * kStride < n4; j += 4 * kStride) {
      float4 x[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) x[u] = row4[j + u * kStride];
#pragma unroll
      for (int u = 0; u < 4; ++u) f(4 * (j + u * kStride), x[u], 4);
    }
    for (; j < n4; j += kStride) f(4 * j, row4[j], 4);
  } else {
    for (int i = threadIdx.x; i < vocab; i += kStride) f(i, make_float4(row[i], 0, 0, 0), 1);
  }
}

// Calls f(i, logit) for every token of the row, in for_each_logit_group's order.
template <typename F>
__device__ __forceinline__ void for_each_logit(const float* row, int vocab, F&& f) {
  for_each_logit_group(row, vocab, [&](int i, float4 x, int n) {
    f(i, x.x);
    if (n < 4) return;
    f(i + 1, x.y);
    f(i + 2, x.z);
    f(i + 3, x.w);
  });
}

// Whether a token whose scaled logit is at most `bound` may still reach `best` with the noise
// of `word`: g = -log(-log u) reaches y only where u >= exp(-exp(-y)). The threshold comes from
// fast exponentials, so it is taken for a y lower by 0.01 (and a bit of best's magnitude) and
// then 0.4% lower again: far beyond their errors, the exact noise's (a few ulp) and the rounding
// of the score's sum, so a token passed over is surely below `best` and never ties it. A NaN
// bound, or a best of -inf, lets every token through.
__device__ __forceinline__ bool may_win_with(uint32_t word, float bound, float best) {
  const float need = best - bound - (0.01f + fabsf(best) * 0x1p-20f);
  return !(sampling_rules::uniform_of_word(word) < __expf(-__expf(-need)) * 0.996f);
}

// One block a multiprocessor at least: without it ptxas holds the kernel to 64 registers and
// spills.
__global__ void __launch_bounds__(kPrepareThreads, 1) prepare_kernel(Pass p) {
  extern __shared__ uint32_t edit_bits[];  // one bit per token, when the row edits logits
  __shared__ Scratch s;
  __shared__ SelectShared sel;
  __shared__ NucleusShared nucleus;
  __shared__ int count;
  __shared__ uint64_t top_keys[kMaxSampleTopLogprobs];
  const int r = blockIdx.x;
  const SampleRowParams q = p.params[r];
  const float* logits = p.logits + int64_t(r) * p.vocab;
  const sampling_rules::TokenEdit* edits = p.edit_offsets ? p.edits + p.edit_offsets[r] : nullptr;
  const int n_edits = p.edit_offsets ? p.edit_offsets[r + 1] - p.edit_offsets[r] : 0;
  if (n_edits > 0) {
    for (int i = threadIdx.x; i < (p.vocab + 31) / 32; i += kPrepareThreads) edit_bits[i] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < n_edits; i += kPrepareThreads) {
      const int t = edits[i].token;
      if (t >= 0 && t < p.vocab) atomicOr(&edit_bits[t >> 5], 1u << (t & 31));
    }
    __syncthreads();
  }
  // An edited token's logit from its raw value (sampling_rules::edited_logit, the host's rule).
  auto adjust = [&](int i, float raw) {
    if (n_edits == 0 || !(edit_bits[i >> 5] >> (i & 31) & 1u)) return raw;
    return sampling_rules::edited_logit(raw, find_edit(edits, n_edits, i), q.penalty, q.frequency,
                                        q.presence);
  };
  const bool greedy = greedy_row(q), top_p = !greedy && q.top_p < 1.0f;
  const double inv_t = 1.0 / q.temperature;

  // Pass 1: the adjusted maximum and the lowest id holding it (the greedy pick), and the raw
  // maximum and mass for the logprob. The mass is summed online against the thread's running
  // maximum (rescaled when it rises), float terms into a double: one pass over the row, and a
  // float exp a token instead of a double one. The host sums in another order and precision, so
  // a logprob agrees with it to a few 1e-7, not in its last bits (no token depends on it).
  float top = -INFINITY, run_max = -INFINITY;
  double run_mass = 0.0;
  bool finite = true;
  int top_id = INT_MAX;
  for_each_logit(logits, p.vocab, [&](int i, float raw) {
    const float v = adjust(i, raw);
    if (v > top)
      top = v, top_id = i;
    else if (v == top)
      top_id = min(top_id, i);
    if (!isfinite(raw)) {  // the logprob is then NaN, which the host checks and reports
      finite = false;
    } else if (raw > run_max) {
      run_mass = run_mass * double(__expf(run_max - raw)) + 1.0;
      run_max = raw;
    } else {
      run_mass += double(__expf(raw - run_max));
    }
  });
  const float thread_top = top;
  top = block_max_float(top, s);
  const int greedy_id = block_min_int(thread_top == top ? top_id : INT_MAX, s);
  const float raw_max = block_max_float(run_max, s);
  // A thread with no finite logit adds nothing; one with a non-finite logit makes it NaN.
  const double own_mass = !finite                ? double(NAN)
                          : run_max == -INFINITY ? 0.0
                                                 : run_mass * exp(double(run_max) - raw_max);
  const double raw_mass = block_sum_double(own_mass, s);

  // The survivors of top-k (keys >= the k-th key), top-p (keys >= the nucleus' last key,
  // counted among top-k's) and min-p, scored in pass 2.
  const bool pick = !greedy;
  uint64_t least = 0;
  if (pick && q.top_k > 0 && q.top_k < p.vocab)
    least = kth_largest(logits, p.vocab, adjust, q.top_k, sel);
  if (top_p)
    least = nucleus_least(logits, p.vocab, adjust, top, q.temperature, least, q.top_p, nucleus);

  // Pass 2 (sampling rows only): the Gumbel argmax over the survivors, four tokens at a time:
  // one Philox draw gives the noise of all four (sampling_rules::gumbel_draw). The pick is the
  // highest score, lowest id among equal ones, in any order, so a token may be passed over
  // whenever its exact score is surely below the thread's best as it stands (never where it
  // could tie): first by the largest noise there is, then by its own uniform (may_win_with).
  // Cheap bounds first, the exact min-p test and score only for the few tokens left.
  float best_score = -INFINITY;
  int best = INT_MAX;
  if (pick) {
    // Every thread starts from the top token's score: it survives every filter, so it is a
    // candidate anyway, and from the start it lets the bounds pass over tokens far below it.
    if (isfinite(top) && greedy_id < p.vocab) {
      best = greedy_id;
      best_score = HEARTH_SR_ADD(sampling_rules::scaled_logit(top, top, q.temperature),
                                 gumbel_noise(q.seed, q.step, greedy_id));
    }
    const float inv_tf = 1.0f / q.temperature;
    // An upper bound on the exact scaled logit (a rounded quotient) from the cheaper product.
    auto scaled_bound = [&](float v) {
      const float approx = HEARTH_SR_SUB(v, top) * inv_tf;
      return approx + fabsf(approx) * 0x1p-20f;
    };
    // Below this bound a token is surely under min-p (the exact test is in double).
    const float log_min_p = q.min_p > 0.0f ? logf(q.min_p) : -INFINITY;
    auto surely_under_min_p = [&](float v, float bound) {
      return v != top && bound + fabsf(bound) * 0x1p-18f < log_min_p - 0.01f;
    };
    auto under_min_p = [&](float v) {
      return q.min_p > 0.0f && v != top && exp((double(v) - top) * inv_t) < double(q.min_p);
    };
    for_each_logit_group(logits, p.vocab, [&](int i0, float4 x, int n) {
      const float raw[4] = {x.x, x.y, x.z, x.w};
      float v[4], bound[4];
      bool live[4], any = false;
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        live[u] = false, v[u] = 0.0f, bound[u] = 0.0f;
        if (u >= n) continue;
        v[u] = adjust(i0 + u, raw[u]);
        if (least != 0 && sort_key(v[u], i0 + u) < least) continue;  // not in top-k / top-p
        bound[u] = scaled_bound(v[u]);
        if (surely_under_min_p(v[u], bound[u])) continue;
        // A NaN bound stays live: the exact score decides it, as it always did.
        live[u] = !(bound[u] + sampling_rules::kGumbelBound < best_score);
        any |= live[u];
      }
      if (!any) return;
      if (n < 4) {  // one token: its own draw
        if (under_min_p(v[0])) return;
        const float score = HEARTH_SR_ADD(sampling_rules::scaled_logit(v[0], top, q.temperature),
                                          gumbel_noise(q.seed, q.step, i0));
        if (sampling_rules::beats(score, i0, best_score, best)) best_score = score, best = i0;
        return;
      }
      const Philox4x32 draw = sampling_rules::gumbel_draw(q.seed, q.step, i0 >> 2);
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        if (!live[u] || !may_win_with(draw.v[u], bound[u], best_score) || under_min_p(v[u]))
          continue;
        const float score = HEARTH_SR_ADD(sampling_rules::scaled_logit(v[u], top, q.temperature),
                                          sampling_rules::gumbel_of_word(draw.v[u]));
        if (sampling_rules::beats(score, i0 + u, best_score, best))
          best_score = score, best = i0 + u;
      }
    });
    best = block_best(best_score, best, s);
  }
  const double log_mass = log(raw_mass);
  auto raw_logprob_of = [&](int token) {
    return float(double(logits[token]) - raw_max - log_mass);
  };

  // top_logprobs: the keys >= the N-th largest raw key, ordered by one thread (N <= 20).
  const int n_top = min(min(q.top_logprobs, kMaxSampleTopLogprobs), p.vocab);
  if (n_top > 0 && p.top_tokens) {
    auto unadjusted = [](int, float raw) { return raw; };
    const uint64_t least = kth_largest(logits, p.vocab, unadjusted, n_top, sel);
    if (threadIdx.x == 0) count = 0;
    __syncthreads();
    for_each_logit_uniform(logits, p.vocab, [&](int i, float raw, bool in) {
      if (!in) return;
      const uint64_t k = sort_key(raw, i);
      if (k >= least) top_keys[atomicAdd(&count, 1)] = k;
    });
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int a = 1; a < n_top; ++a)
        for (int b = a; b > 0 && top_keys[b] > top_keys[b - 1]; --b) {
          const uint64_t t = top_keys[b];
          top_keys[b] = top_keys[b - 1];
          top_keys[b - 1] = t;
        }
    }
    __syncthreads();
    if (threadIdx.x < n_top) {
      const int token = key_id(top_keys[threadIdx.x]);
      p.top_tokens[r * kMaxSampleTopLogprobs + threadIdx.x] = token;
      p.top_logprobs[r * kMaxSampleTopLogprobs + threadIdx.x] = raw_logprob_of(token);
    }
  }
  if (threadIdx.x == 0) {
    const int token = greedy ? greedy_id : best;
    p.tokens[r] = token;
    // No token (every logit NaN): the host sees the id out of range and reports it.
    p.logprobs[r] = token < p.vocab ? raw_logprob_of(token) : float(NAN);
  }
}

[[noreturn]] void fail(const std::string& what) {
  throw std::invalid_argument("batch_sample: " + what);
}

}  // namespace

void batch_sample(const BatchSampleArgs& a, cudaStream_t stream) {
  if (a.rows < 0) fail("rows is negative");
  if (a.rows == 0) return;
  if (a.vocab < 1 || a.vocab > (1 << 24)) fail("vocab must be in 1 .. 2^24");
  if (!a.logits || !a.params || !a.tokens || !a.logprobs)
    fail("logits, params, tokens and logprobs are required");
  if ((a.edit_offsets == nullptr) != (a.edits == nullptr))
    fail("edit_offsets and edits go together");
  if ((a.top_tokens == nullptr) != (a.top_logprobs == nullptr))
    fail("top_tokens and top_logprobs go together");

  const size_t bitmap_bytes = size_t(a.vocab + 31) / 32 * 4;
  static const bool configured = [&] {
    HEARTH_CUDA_CHECK(cudaFuncSetAttribute(
        prepare_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 160 * 1024));
    return true;
  }();
  (void)configured;
  if (bitmap_bytes > 160 * 1024) fail("vocab too large for the edited-token bitmap");

  // All rows in one launch: a row needs no memory beyond its block's shared memory.
  Pass p;
  p.logits = a.logits;
  p.vocab = a.vocab;
  p.params = a.params;
  p.edit_offsets = a.edit_offsets;
  p.edits = a.edits;
  p.tokens = a.tokens;
  p.logprobs = a.logprobs;
  p.top_tokens = a.top_tokens;
  p.top_logprobs = a.top_logprobs;
  prepare_kernel<<<a.rows, kPrepareThreads, a.edit_offsets ? bitmap_bytes : 0, stream>>>(p);
  HEARTH_CUDA_CHECK_LAUNCH();
}

}  // namespace hearth::kernels
