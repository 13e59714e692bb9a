// Kernels only tensor parallelism needs (issue 26).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/ops.h"

namespace hearth::kernels {

// One rank's part of the embedding when it holds vocabulary rows [vocab_begin, vocab_end) as
// `table`: x[t] is token t's row (fp32) if this rank holds it, zeros otherwise, so the ranks'
// parts summed give exactly the embedding.
void embedding_range(Half type, const void* table, const int32_t* tokens, int n, int hidden,
                     int vocab_begin, int vocab_end, float* x, cudaStream_t stream);

}  // namespace hearth::kernels
