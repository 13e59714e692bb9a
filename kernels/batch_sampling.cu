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
template <typename Key>
__device__ uint64_t kth_largest(const Key& key, int vocab, int k, SelectShared& sh) {
  const int lane = threadIdx.x & 31;
  uint64_t prefix = 0, mask = 0;
  int remaining = k;
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += kPrepareThreads) sh.hist[i] = 0;
    __syncthreads();
    for (int i0 = 0; i0 < vocab; i0 += kPrepareThreads) {
      const int i = i0 + threadIdx.x;
      const uint64_t u = i < vocab ? key(i) : 0;
      const int digit = i < vocab && (u & mask) == prefix ? int(u >> shift & 255) : 256;
      // Lanes with the same digit add once: logits crowd a few digits.
      const unsigned peers = __match_any_sync(~0u, digit);
      if (digit < 256 && lane == __ffs(peers) - 1) atomicAdd(&sh.hist[digit], __popc(peers));
    }
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
      for (int i = threadIdx.x; i < vocab; i += kPrepareThreads) {
        const uint64_t u = key(i);
        if ((u & mask) == prefix) sh.pool[atomicAdd(&sh.count, 1)] = u;
      }
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
template <typename Value>
__device__ uint64_t nucleus_least(const Value& value, float top, float temperature, int vocab,
                                  uint64_t floor, float top_p, NucleusShared& sh) {
  uint64_t prefix = 0, mask = 0;
  unsigned long long remaining = 0;
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += kPrepareThreads) sh.mass[i] = 0, sh.count[i] = 0;
    __syncthreads();
    // Whole warps every iteration: the bucket adds are warp-wide.
    for (int i0 = 0; i0 < vocab; i0 += kPrepareThreads) {
      const int i = i0 + threadIdx.x;
      int digit = 256;
      unsigned long long w = 0;
      if (i < vocab) {
        const float v = value(i);
        const uint64_t u = sort_key(v, i);
        if (u >= floor && (u & mask) == prefix) {
          digit = int(u >> shift & 255);
          w = sampling_rules::nucleus_weight(v, top, temperature);
        }
      }
      warp_bucket_add(digit, w, sh.count, sh.mass);
    }
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
      for (int i = threadIdx.x; i < vocab; i += kPrepareThreads) {
        const float v = value(i);
        const uint64_t u = sort_key(v, i);
        if (u < floor || (u & mask) != prefix) continue;
        const int at = atomicAdd(&sh.n, 1);
        sh.pool[at] = u;
        sh.pool_mass[at] = sampling_rules::nucleus_weight(v, top, temperature);
      }
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
// four in flight per thread; else one token a call (n = 1, its logit in x.x).
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
  auto value = [&](int i) { return adjust(i, logits[i]); };
  const bool greedy = greedy_row(q), top_p = !greedy && q.top_p < 1.0f;
  const double inv_t = 1.0 / q.temperature;

  // Pass 1: the adjusted maximum and the lowest id holding it (the greedy pick), and the raw
  // maximum for the logprob.
  float top = -INFINITY, raw_max = -INFINITY;
  int top_id = INT_MAX;
  for_each_logit(logits, p.vocab, [&](int i, float raw) {
    const float v = adjust(i, raw);
    if (v > top)
      top = v, top_id = i;
    else if (v == top)
      top_id = min(top_id, i);
    raw_max = fmaxf(raw_max, raw);
  });
  const float thread_top = top;
  top = block_max_float(top, s);
  const int greedy_id = block_min_int(thread_top == top ? top_id : INT_MAX, s);
  raw_max = block_max_float(raw_max, s);

  // The survivors of top-k (keys >= the k-th key), top-p (keys >= the nucleus' last key,
  // counted among top-k's) and min-p, scored in pass 2.
  const bool pick = !greedy;
  uint64_t least = 0;
  if (pick && q.top_k > 0 && q.top_k < p.vocab) {
    auto key = [&](int i) { return sort_key(value(i), i); };
    least = kth_largest(key, p.vocab, q.top_k, sel);
  }
  if (top_p) {
    least = nucleus_least(value, top, q.temperature, p.vocab, least, q.top_p, nucleus);
  }

  // Pass 2: the raw mass (logprob) and the Gumbel argmax over the survivors, four tokens at a
  // time: one Philox draw gives the noise of all four (sampling_rules::gumbel_draw), drawn once
  // one of them may still win against the thread's best as it stood before the group. The
  // pick is the highest score, lowest id among equal ones, in any order.
  double raw_mass = 0.0;
  float best_score = -INFINITY;
  int best = INT_MAX;
  for_each_logit_group(logits, p.vocab, [&](int i0, float4 x, int n) {
    const float raw[4] = {x.x, x.y, x.z, x.w};
    float scaled[4];
    bool may_win[4], any = false;
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      may_win[u] = false, scaled[u] = 0.0f;
      if (u >= n) continue;
      // A logit that is not finite makes the logprob NaN, which the host checks and reports.
      raw_mass += isfinite(raw[u]) ? exp(double(raw[u]) - raw_max) : double(NAN);
      if (!pick) continue;
      const int i = i0 + u;
      const float v = adjust(i, raw[u]);
      if (least != 0 && sort_key(v, i) < least) continue;
      if (q.min_p > 0.0f && v != top && exp((double(v) - top) * inv_t) < double(q.min_p)) continue;
      scaled[u] = sampling_rules::scaled_logit(v, top, q.temperature);
      // Cannot reach this thread's best even with the largest noise: no noise needed.
      may_win[u] = !(scaled[u] + sampling_rules::kGumbelBound < best_score);
      any |= may_win[u];
    }
    if (!any) return;
    if (n < 4) {  // one token: its own draw
      const float score = HEARTH_SR_ADD(scaled[0], gumbel_noise(q.seed, q.step, i0));
      if (sampling_rules::beats(score, i0, best_score, best)) best_score = score, best = i0;
      return;
    }
    const Philox4x32 draw = sampling_rules::gumbel_draw(q.seed, q.step, i0 >> 2);
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      if (!may_win[u]) continue;
      const float score = HEARTH_SR_ADD(scaled[u], sampling_rules::gumbel_of_word(draw.v[u]));
      if (sampling_rules::beats(score, i0 + u, best_score, best)) best_score = score, best = i0 + u;
    }
  });
  raw_mass = block_sum_double(raw_mass, s);
  if (pick) best = block_best(best_score, best, s);
  const double log_mass = log(raw_mass);
  auto raw_logprob_of = [&](int token) {
    return float(double(logits[token]) - raw_max - log_mass);
  };

  // top_logprobs: the keys >= the N-th largest raw key, ordered by one thread (N <= 20).
  const int n_top = min(min(q.top_logprobs, kMaxSampleTopLogprobs), p.vocab);
  if (n_top > 0 && p.top_tokens) {
    auto raw_key = [&](int i) { return sort_key(logits[i], i); };
    const uint64_t least = kth_largest(raw_key, p.vocab, n_top, sel);
    if (threadIdx.x == 0) count = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < p.vocab; i += kPrepareThreads) {
      const uint64_t k = raw_key(i);
      if (k >= least) top_keys[atomicAdd(&count, 1)] = k;
    }
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
