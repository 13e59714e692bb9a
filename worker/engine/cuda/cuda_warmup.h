// The CUDA engine's slow first steps, started early on a helper thread: creating the context
// (~120 ms on an H100), loading cuBLASLt (~60 ms, beside the context) and its heuristics set-up
// (~50 ms, Gemm::warm_up). A served worker starts it as soon as it knows the device, so it runs
// while the weights are imported; the backend collects the result when it is built.
#pragma once

#include <future>
#include <memory>

#include "kernels/gemm.h"

namespace hearth {

class CudaWarmup {
 public:
  CudaWarmup(int device, kernels::Half type);  // destroying it waits for the helper thread
  CudaWarmup(const CudaWarmup&) = delete;
  CudaWarmup& operator=(const CudaWarmup&) = delete;

  // Waits for the warm-up and hands over its GEMM runner; rethrows what failed there.
  std::unique_ptr<kernels::Gemm> take_gemm();

 private:
  std::future<std::unique_ptr<kernels::Gemm>> gemm_;
};

}  // namespace hearth
