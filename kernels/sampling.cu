// Sampling on the GPU with the host sampler's rules (worker/engine/sampler.h): repetition penalty,
// temperature, top-k, top-p, min-p and the Gumbel-max pick (sampling_rules.h). Every token is
// sorted by (penalised logit desc, id asc) with a radix sort of 64-bit keys, then one block
// walks the sorted list: weights, the kept prefix, and the pick, with sums in a fixed order so
// the result does not depend on scheduling. (The legacy one-sequence path; the batched sampler
// sorts nothing. Its top-p walk keeps double weights, where the host Sampler and the batched
// sampler count integer ones: they can differ where the sum sits within rounding of top_p.)
#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda_check.h"
#include "kernels/half_utils.cuh"
#include "kernels/philox.h"
#include "kernels/sampling.cuh"

namespace hearth::kernels {

namespace {

using namespace sampling;

__global__ void keys_kernel(const float* logits, int vocab, const uint8_t* seen, float penalty,
                            uint64_t* keys) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < vocab; i += gridDim.x * blockDim.x) {
    float v = logits[i];
    if (seen && seen[i]) v = penalised(v, penalty);
    keys[i] = sort_key(v, i);
  }
}

__global__ void __launch_bounds__(kThreads) choose_kernel(SampleArgs a, const uint64_t* sorted) {
  __shared__ Scratch scratch;
  const int n = a.top_k > 0 ? min(a.top_k, a.vocab) : a.vocab;
  const Rule rule{a.temperature, a.top_p, a.min_p, a.seed, a.step};
  const int pick = choose_sorted(sorted, n, -1.0, rule, scratch);
  const int32_t token = key_id(sorted[pick]);
  const float logprob = raw_logprob(a.logits, a.vocab, token, scratch);
  if (threadIdx.x == 0) {
    *a.token = token;
    *a.logprob = logprob;
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
