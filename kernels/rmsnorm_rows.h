// The head's final norm over the rows a step samples from (issue 23): rmsnorm of rows idx[0..n)
// of x into rows 0..n of out, in one launch. The same bytes as gather_rows (kernels/batch_ops.h)
// then rmsnorm (kernels/ops.h): the gather only copies, and the norm reads the same values in
// the same order with the same threads.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/ops.h"

namespace hearth::kernels {

void rmsnorm_rows(Half type, const float* x, const int32_t* idx, const float* weight, int n,
                  int hidden, float eps, void* out, cudaStream_t stream);

}  // namespace hearth::kernels
