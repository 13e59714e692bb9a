// Builds without CUDA: GPU ranks as processes are refused by name.
#include <stdexcept>

#include "worker/tp/cuda_process_tp.h"

namespace hearth {

std::unique_ptr<Backend> make_cuda_process_tp_backend(const EngineOptions&, const EngineWeights&,
                                                      const TpModelSource&, const TpProcessOptions&,
                                                      const KvMemoryFactory&) {
  throw std::runtime_error(
      "tensor_parallel_processes with the cuda backend: this build has no CUDA");
}

void serve_cuda_follower(int, const TpHello&, std::vector<UniqueFd>, const OpenFollowerModel&,
                         const FollowerKvLease&) {
  throw std::runtime_error("a cuda tensor-parallel rank: this build has no CUDA");
}

}  // namespace hearth
