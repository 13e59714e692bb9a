#include "kernels/token_mask.h"

#include <algorithm>
#include <cfloat>

#include "kernels/cuda_check.h"

namespace hearth::kernels {

namespace {

constexpr int kThreads = 256;

// One block per masked row; consecutive threads take consecutive tokens, so the writes
// coalesce and each mask word is read by the 32 threads of one warp at once.
__global__ void __launch_bounds__(kThreads)
    token_mask_kernel(float* logits, int vocab, const int32_t* rows, const uint32_t* masks) {
  const int words = (vocab + 31) / 32;
  const uint32_t* mask = masks + int64_t(blockIdx.x) * words;
  float* row = logits + int64_t(rows[blockIdx.x]) * vocab;
  for (int t = blockIdx.y * kThreads + threadIdx.x; t < vocab; t += gridDim.y * kThreads)
    if (!(mask[t >> 5] >> (t & 31) & 1u)) row[t] = -FLT_MAX;
}

}  // namespace

void apply_token_masks(float* logits, int vocab, const int32_t* rows, const uint32_t* masks,
                       int count, cudaStream_t stream) {
  if (count <= 0) return;
  // A few blocks per row so that one long row does not run on a single SM.
  const int per_row = std::min(16, (vocab + kThreads * 8 - 1) / (kThreads * 8));
  token_mask_kernel<<<dim3(unsigned(count), unsigned(std::max(per_row, 1))), kThreads, 0, stream>>>(
      logits, vocab, rows, masks);
  HEARTH_CUDA_CHECK(cudaGetLastError());
}

}  // namespace hearth::kernels
