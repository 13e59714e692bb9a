#include "worker/engine/cuda/cuda_warmup.h"

#include <cuda_runtime.h>

#include <thread>

#include "kernels/cublaslt_library.h"
#include "kernels/cuda_check.h"

namespace hearth {

namespace {

std::unique_ptr<kernels::Gemm> warm_up(int device, kernels::Half type) {
  // The context and the library load do not depend on each other: side by side.
  std::thread context([device] {
    if (cudaSetDevice(device) == cudaSuccess) cudaFree(nullptr);  // errors resurface below
  });
  try {
    kernels::cublaslt();
  } catch (...) {
    context.join();
    throw;
  }
  context.join();
  HEARTH_CUDA_CHECK(cudaSetDevice(device));
  auto gemm = std::make_unique<kernels::Gemm>(type);
  gemm->warm_up();
  return gemm;
}

}  // namespace

CudaWarmup::CudaWarmup(int device, kernels::Half type)
    : gemm_(std::async(std::launch::async, warm_up, device, type)) {}

std::unique_ptr<kernels::Gemm> CudaWarmup::take_gemm() {
  return gemm_.get();
}

}  // namespace hearth
