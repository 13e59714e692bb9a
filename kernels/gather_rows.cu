// Copies the hidden rows whose logits a step needs (each sequence's last token) into a dense
// [rows, hidden] buffer for the final norm and the LM head.
#include <stdexcept>

#include "kernels/batch_ops.h"
#include "kernels/cuda_check.h"

namespace hearth::kernels {

namespace {

__global__ void gather_rows_kernel(const float* in, const int32_t* idx, int hidden, float* out) {
  const float* src = in + int64_t(idx[blockIdx.x]) * hidden;
  float* dst = out + int64_t(blockIdx.x) * hidden;
  if (hidden % 4 == 0) {
    for (int i = threadIdx.x; i < hidden / 4; i += blockDim.x)
      reinterpret_cast<float4*>(dst)[i] = reinterpret_cast<const float4*>(src)[i];
  } else {
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) dst[i] = src[i];
  }
}

}  // namespace

void gather_rows(const float* in, const int32_t* idx, int rows, int hidden, float* out,
                 cudaStream_t stream) {
  if (rows < 0 || hidden < 1) throw std::invalid_argument("gather_rows: bad rows or hidden");
  if (rows == 0) return;
  if (!in || !idx || !out) throw std::invalid_argument("gather_rows: in, idx and out are required");
  gather_rows_kernel<<<rows, 256, 0, stream>>>(in, idx, hidden, out);
  HEARTH_CUDA_CHECK_LAUNCH();
}

}  // namespace hearth::kernels
