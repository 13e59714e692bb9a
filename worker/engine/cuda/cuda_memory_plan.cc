#include "worker/engine/cuda/cuda_memory_plan.h"

#include <algorithm>
#include <optional>
#include <stdexcept>

#include "kernels/cuda_check.h"
#include "worker/engine/backend_factory.h"

namespace hearth {

StepLimits StepLimits::of(const EngineOptions& options, int context_length) {
  StepLimits l;
  l.max_tokens = std::clamp(options.max_batch_tokens, 1, kMaxStepTokens);
  l.max_seqs = std::max(options.max_running, 1);
  l.max_step_seqs = std::min(l.max_tokens, l.max_seqs);
  const int block = options.kv_block_size;
  l.max_blocks = (context_length + block - 1) / block;
  return l;
}

int64_t cuda_kv_bytes_per_token(const ModelConfig& c) {
  return int64_t(c.n_layers) * c.kv_dim() * 2 /* K and V */ * 2 /* 16-bit */;
}

CudaKvPool::CudaKvPool(const ModelConfig& c, const EngineOptions& options, int context_length,
                       cudaStream_t stream, DeviceArena& arena) {
  // The device's free memory only matters when no explicit size is given.
  std::optional<size_t> free;
  if (options.kv_pool_tokens <= 0 && options.kv_pool_gb <= 0) {
    size_t f = 0, total = 0;
    HEARTH_CUDA_CHECK(cudaMemGetInfo(&f, &total));
    free = f;
  }
  shape_ = resolve_kv_pool(options, context_length, cuda_kv_bytes_per_token(c), free);
  if (shape_.num_blocks < 1) throw std::runtime_error("the KV pool holds no block");
  part_bytes_ = size_t(shape_.block_size) * c.kv_dim() * 2;
  block_bytes_ = 2 * size_t(c.n_layers) * part_bytes_;
  const size_t pool = bytes();
  pool_ = arena.alloc(pool);
  HEARTH_CUDA_CHECK(cudaMemsetAsync(pool_.get(), 0, pool, stream));
  HEARTH_CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace hearth
