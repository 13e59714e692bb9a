// Greedy sampling on the GPU: a first pass where each block reduces a slice of the vocabulary
// to (best penalised value, its id, raw max, raw sum of exp), and a one-block second pass that
// merges the slices in order. Ties go to the lowest id, matching the host sampler. A logit that
// is not finite makes the sum, and so the logprob, NaN: the host checks that.
#include <cfloat>
#include <climits>

#include "kernels/cuda_check.h"
#include "kernels/half_utils.cuh"

namespace hearth::kernels {

namespace {

constexpr int kThreads = 512;
constexpr int kPerBlock = 8192;

struct Partial {
  float best;
  int id;
  float raw_max;
  float raw_sum;
};

__device__ __forceinline__ bool better(float v, int id, float best, int best_id) {
  return v > best || (v == best && id < best_id);
}

// Saturating, as the host's penalised_logit: a finite logit stays finite.
__device__ __forceinline__ float penalised(float v, bool seen, float penalty) {
  return seen ? fminf(fmaxf(v > 0.0f ? v / penalty : v * penalty, -FLT_MAX), FLT_MAX) : v;
}

// Combines (best, id) and (max, sum) of two partials.
__device__ __forceinline__ Partial merge(Partial a, Partial b) {
  Partial r;
  const bool b_wins = better(b.best, b.id, a.best, a.id);
  r.best = b_wins ? b.best : a.best;
  r.id = b_wins ? b.id : a.id;
  r.raw_max = fmaxf(a.raw_max, b.raw_max);
  r.raw_sum = (a.raw_sum == 0.0f ? 0.0f : a.raw_sum * __expf(a.raw_max - r.raw_max)) +
              (b.raw_sum == 0.0f ? 0.0f : b.raw_sum * __expf(b.raw_max - r.raw_max));
  return r;
}

__device__ Partial block_merge(Partial p) {
  __shared__ Partial shared[kThreads / 32];
  for (int o = 16; o > 0; o >>= 1) {
    Partial q{__shfl_xor_sync(~0u, p.best, o), __shfl_xor_sync(~0u, p.id, o),
              __shfl_xor_sync(~0u, p.raw_max, o), __shfl_xor_sync(~0u, p.raw_sum, o)};
    // Merge in lane order so the result is the same for every lane.
    p = (threadIdx.x & o) ? merge(q, p) : merge(p, q);
  }
  if ((threadIdx.x & 31) == 0) shared[threadIdx.x >> 5] = p;
  __syncthreads();
  if (threadIdx.x == 0)
    for (int w = 1; w < int(blockDim.x / 32); ++w) p = merge(p, shared[w]);
  return p;  // valid in thread 0
}

__global__ void __launch_bounds__(kThreads)
    argmax_partial_kernel(const float* logits, int vocab, const uint8_t* seen, float penalty,
                          Partial* partials) {
  const int begin = blockIdx.x * kPerBlock, end = min(vocab, begin + kPerBlock);
  Partial p{-INFINITY, INT_MAX, -INFINITY, 0.0f};
  bool finite = true;
  for (int i = begin + threadIdx.x; i < end; i += kThreads) {
    const float raw = logits[i];
    finite = finite && isfinite(raw);
    const float v = seen ? penalised(raw, seen[i] != 0, penalty) : raw;
    if (better(v, i, p.best, p.id)) {
      p.best = v;
      p.id = i;
    }
    if (raw > p.raw_max) {
      p.raw_sum = p.raw_sum * __expf(p.raw_max - raw) + 1.0f;
      p.raw_max = raw;
    } else {
      p.raw_sum += __expf(raw - p.raw_max);
    }
  }
  if (!finite) p.raw_sum = NAN;  // merges keep it: NaN times anything is NaN
  p = block_merge(p);
  if (threadIdx.x == 0) partials[blockIdx.x] = p;
}

__global__ void argmax_final_kernel(const float* logits, int vocab, const Partial* partials,
                                    int blocks, int32_t* token, float* logprob) {
  Partial p = partials[0];
  for (int b = 1; b < blocks; ++b) p = merge(p, partials[b]);
  // All NaN: nothing compared greater, so no id was chosen.
  const bool chosen = p.id >= 0 && p.id < vocab;
  *token = chosen ? p.id : 0;
  *logprob = chosen ? logits[p.id] - p.raw_max - logf(p.raw_sum) : NAN;
}

int blocks_for(int vocab) {
  return (vocab + kPerBlock - 1) / kPerBlock;
}

__global__ void set_decode_params_kernel(const int32_t* sampled, int32_t* token_out,
                                         int32_t* pos_out, int pos) {
  *token_out = *sampled;
  *pos_out = pos;
}

}  // namespace

size_t argmax_scratch_floats(int vocab) {
  return size_t(blocks_for(vocab)) * sizeof(Partial) / sizeof(float);
}

void argmax_logprob(const float* logits, int vocab, const uint8_t* seen, float penalty,
                    float* scratch, int32_t* token, float* logprob, cudaStream_t stream) {
  const int blocks = blocks_for(vocab);
  Partial* partials = reinterpret_cast<Partial*>(scratch);
  argmax_partial_kernel<<<blocks, kThreads, 0, stream>>>(logits, vocab, seen, penalty, partials);
  HEARTH_CUDA_CHECK_LAUNCH();
  argmax_final_kernel<<<1, 1, 0, stream>>>(logits, vocab, partials, blocks, token, logprob);
  HEARTH_CUDA_CHECK_LAUNCH();
}

void set_decode_params(const int32_t* sampled, int32_t* token_out, int32_t* pos_out, int pos,
                       cudaStream_t stream) {
  set_decode_params_kernel<<<1, 1, 0, stream>>>(sampled, token_out, pos_out, pos);
  HEARTH_CUDA_CHECK_LAUNCH();
}

}  // namespace hearth::kernels
