// Structured output's token mask on the device: the masked logits of chosen rows become the
// lowest float before the sampler runs. The CPU reference is apply_token_mask
// (worker/engine/backend.h), which the engine's host path uses.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace hearth::kernels {

// For i in [0, count): row rows[i] of `logits` (vocab floats a row) keeps token t's logit when
// bit (t % 32) of masks[i * words + t / 32] is set (words = (vocab + 31) / 32), else it
// becomes the lowest float. Rows not listed are untouched.
void apply_token_masks(float* logits, int vocab, const int32_t* rows, const uint32_t* masks,
                       int count, cudaStream_t stream);

}  // namespace hearth::kernels
