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

int64_t cuda_kv_bytes_per_token(const ModelConfig& c, KvCacheDtype kv_dtype) {
  if (kv_dtype == KvCacheDtype::Fp8E4m3)  // a code per value, a 4-byte scale per KV head
    return int64_t(c.n_layers) * 2 * c.n_kv_heads * (c.head_dim + 4);
  return int64_t(c.n_layers) * c.kv_dim() * 2 /* K and V */ * 2 /* 16-bit */;
}

CudaKvPool::CudaKvPool(const ModelConfig& c, const EngineOptions& options, int context_length,
                       cudaStream_t stream, DeviceArena& arena, const KvMemoryFactory& lease,
                       int rank) {
  fp8_ = options.kv_cache_dtype == KvCacheDtype::Fp8E4m3;
  scale_offset_ = fp8_ ? int64_t(options.kv_block_size) * c.kv_dim() : 0;
  part_bytes_ = size_t(cuda_kv_bytes_per_token(c, options.kv_cache_dtype)) / (2 * c.n_layers) *
                options.kv_block_size;
  // Every part starts 16-byte aligned (the kernels' vector loads), also with odd block sizes.
  part_bytes_ = (part_bytes_ + 15) / 16 * 16;
  block_bytes_ = 2 * size_t(c.n_layers) * part_bytes_;
  if (lease) {
    // Served: hearth-server's budget decides; the free memory here is not this worker's to take.
    shape_ = resolve_kv_pool(options, context_length,
                             cuda_kv_bytes_per_token(c, options.kv_cache_dtype), std::nullopt);
    const int context_blocks = (context_length + shape_.block_size - 1) / shape_.block_size;
    if (options.kv_pool_tokens <= 0 && options.kv_pool_gb <= 0)
      shape_.num_blocks = std::max(options.max_running, 1) * context_blocks;
    memory_ = lease(int64_t(block_bytes_), shape_.num_blocks, context_blocks, rank);
    if (!memory_ || memory_->block_bytes() != int64_t(block_bytes_))
      throw std::runtime_error("the leased KV memory does not have blocks of " +
                               std::to_string(block_bytes_) + " bytes");
    base_ = reinterpret_cast<char*>(memory_->base());
    prepare(stream);
    HEARTH_CUDA_CHECK(cudaStreamSynchronize(stream));
    return;
  }
  // The device's free memory only matters when no explicit size is given.
  std::optional<size_t> free;
  if (options.kv_pool_tokens <= 0 && options.kv_pool_gb <= 0) {
    size_t f = 0, total = 0;
    HEARTH_CUDA_CHECK(cudaMemGetInfo(&f, &total));
    free = f;
  }
  shape_ = resolve_kv_pool(options, context_length,
                           cuda_kv_bytes_per_token(c, options.kv_cache_dtype), free);
  if (shape_.num_blocks < 1) throw std::runtime_error("the KV pool holds no block");
  const size_t pool = bytes();
  pool_ = arena.alloc(pool);
  base_ = pool_.get<char>();
  HEARTH_CUDA_CHECK(cudaMemsetAsync(pool_.get(), 0, pool, stream));
  HEARTH_CUDA_CHECK(cudaStreamSynchronize(stream));
}

KvPoolShape CudaKvPool::shape() const {
  // As the CPU backend's view: other workers' chunks are mapped read-only into the same
  // reserved range past the pool's own, so k(layer) / v(layer) + id * block_stride() address
  // their blocks like own ones and captured decode graphs stay valid (the range never moves).
  // A kernel write there would fault (read-only device access); check_batch refuses a table
  // that would ask for one.
  return memory_ ? leased_kv_pool(shape_.block_size, *memory_) : shape_;
}

int64_t CudaKvPool::addressable_blocks() const {
  if (!memory_) return shape_.num_blocks;
  const KvPoolShape s = shape();
  return std::max<int64_t>(memory_->max_blocks(), int64_t(s.foreign_first) + s.foreign_blocks);
}

void CudaKvPool::prepare(cudaStream_t stream) {
  if (!memory_) return;
  if (memory_->blocks() == 0) {
    block0_zeroed_ = false;  // a chunk mapped later holds whatever its last user left
    return;
  }
  if (block0_zeroed_) return;
  HEARTH_CUDA_CHECK(cudaMemsetAsync(base_, 0, block_bytes_, stream));
  block0_zeroed_ = true;
}

}  // namespace hearth
