// paged_kv_write at a chosen launch shape, for tests and benchmarks: `heads_per_block` heads of
// one token share a block (1: one block per (token, head), the original shape; 0: the shape
// paged_kv_write picks by the step's size). Every shape gives the same bits (each head reduces
// in one order). Refused unless it divides n_heads and n_kv_heads, fits 1,024 threads and,
// above 1, gives each head whole warps (head_dim a multiple of 64).
#pragma once

#include "kernels/batch_ops.h"

namespace hearth::kernels {

void paged_kv_write_shaped(Half type, const PagedKvWriteArgs& args, int heads_per_block,
                           cudaStream_t stream);

}  // namespace hearth::kernels
