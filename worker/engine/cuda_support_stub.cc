// Used when hearth is built without nvcc: the CUDA engine does not exist in this binary.
#include <stdexcept>

#include "worker/engine/cuda_support.h"

namespace hearth {

bool cuda_device_available() {
  return false;
}

std::shared_ptr<CudaWarmup> start_cuda_warmup(int, DType) {
  return nullptr;
}

std::unique_ptr<Backend> make_cuda_backend(const EngineOptions&, const EngineWeights&, int,
                                           std::shared_ptr<CudaWarmup>, const KvMemoryFactory&) {
  throw std::runtime_error(
      "this hearth was built without CUDA (no nvcc found at build time); "
      "use --backend cpu");
}

}  // namespace hearth
