#include <stdexcept>
#include <string>

#include "kernels/cuda_check.h"
#include "kernels/half_utils.cuh"
#include "kernels/pdl.cuh"
#include "kernels/rmsnorm_row.cuh"
#include "kernels/rmsnorm_rows.h"

namespace hearth::kernels {

namespace {

// Row idx[r] of x (row r without idx) into row r of out.
template <typename T>
__global__ void rmsnorm_kernel(const float* x, const int32_t* idx, const float* weight, int hidden,
                               float eps, T* out) {
  __shared__ float scratch[32];
  // Programmatic dependent launch: the matmul after it may start streaming its weights once
  // every row's block runs, and this kernel may start while the one writing x finishes.
  allow_dependents_early();
  wait_for_producer();
  const float* row = x + int64_t(idx ? idx[blockIdx.x] : int(blockIdx.x)) * hidden;
  rmsnorm_row(row, weight, hidden, eps, out + int64_t(blockIdx.x) * hidden, scratch);
}

void launch_rmsnorm(Half type, const float* x, const int32_t* idx, const float* weight, int n,
                    int hidden, float eps, void* out, cudaStream_t stream) {
  if (n == 0) return;
  const int threads = rmsnorm_block_threads(hidden);
  HEARTH_DISPATCH_HALF(type, T,
                       launch_pdl(rmsnorm_kernel<T>, dim3(n), dim3(threads), 0, stream, x, idx,
                                  weight, hidden, eps, static_cast<T*>(out)));
}

}  // namespace

void rmsnorm(Half type, const float* x, const float* weight, int n, int hidden, float eps,
             void* out, cudaStream_t stream) {
  launch_rmsnorm(type, x, nullptr, weight, n, hidden, eps, out, stream);
}

void rmsnorm_rows(Half type, const float* x, const int32_t* idx, const float* weight, int n,
                  int hidden, float eps, void* out, cudaStream_t stream) {
  if (n < 0 || hidden < 1)
    throw std::invalid_argument("rmsnorm_rows: bad n " + std::to_string(n) + " or hidden " +
                                std::to_string(hidden));
  if (n > 0 && (!x || !idx || !weight || !out))
    throw std::invalid_argument("rmsnorm_rows: x, idx, weight and out are required");
  launch_rmsnorm(type, x, idx, weight, n, hidden, eps, out, stream);
}

}  // namespace hearth::kernels
