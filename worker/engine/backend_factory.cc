#include "worker/engine/backend_factory.h"

#include <algorithm>
#include <stdexcept>

#include "worker/engine/cpu_backend.h"
#include "worker/engine/cuda_support.h"
#include "worker/engine/ranked_kv_memory.h"

namespace hearth {

namespace {

// The GPU pool's default share of the memory left free once everything else is allocated.
constexpr double kDefaultDevicePoolFraction = 0.9;

}  // namespace

BackendKind resolve_backend(BackendKind requested) {
  if (requested != BackendKind::Auto) return requested;
  return cuda_device_available() ? BackendKind::Cuda : BackendKind::Cpu;
}

int resolve_context_length(const EngineOptions& options, const ModelConfig& config) {
  int limit = config.max_position;
  if (config.sliding_window > 0) limit = std::min(limit, config.sliding_window);
  if (options.context_length > 0) {
    if (options.context_length > limit)
      throw std::runtime_error("context_length " + std::to_string(options.context_length) +
                               " exceeds the model's limit of " + std::to_string(limit));
    return options.context_length;
  }
  return std::min(limit, 4096);
}

KvPoolShape resolve_kv_pool(const EngineOptions& options, int context_length,
                            int64_t bytes_per_token, std::optional<size_t> device_free_bytes) {
  const int block = options.kv_block_size;
  if (block <= 0)
    throw std::runtime_error("kv_block_size must be positive, got " + std::to_string(block));
  if ((options.kv_pool_tokens > 0) + (options.kv_pool_gb > 0) + (options.kv_pool_fraction > 0) > 1)
    throw std::runtime_error(
        "more than one of kv_pool_tokens, kv_pool_gb and kv_pool_fraction is set: give one");
  constexpr double kGiB = double(1ull << 30);
  int64_t tokens = 0;
  if (options.kv_pool_tokens > 0) {
    tokens = options.kv_pool_tokens;
  } else if (options.kv_pool_gb > 0) {
    tokens = int64_t(options.kv_pool_gb * kGiB / double(bytes_per_token));
    if (tokens < block)
      throw std::runtime_error("kv_pool_gb " + std::to_string(options.kv_pool_gb) +
                               " holds less than one KV block (" +
                               std::to_string(bytes_per_token * block) + " bytes)");
  } else if (device_free_bytes) {
    // A share of the device's free memory, whole blocks of it.
    const double fraction =
        options.kv_pool_fraction > 0 ? options.kv_pool_fraction : kDefaultDevicePoolFraction;
    const size_t free = *device_free_bytes;
    tokens = int64_t(fraction * double(free)) / bytes_per_token;
    tokens = std::min(tokens, int64_t(std::max(options.max_running, 1)) * context_length);
    if (tokens < context_length)
      throw std::runtime_error(
          "the GPU has room for " + std::to_string(tokens) + " KV positions (" +
          std::to_string(free >> 20) + " MiB free), less than one context of " +
          std::to_string(context_length) + "; lower context_length or free GPU memory");
    return {block, int(std::min<int64_t>(tokens / block, 1 << 30))};
  } else if (options.kv_pool_fraction > 0) {
    throw std::runtime_error(
        "kv_pool_fraction sizes the cuda backend's pool; on the cpu give kv_pool_tokens or "
        "kv_pool_gb");
  } else {
    const int64_t capped = std::max<int64_t>(context_length, int64_t(kGiB) / bytes_per_token);
    tokens = std::min(int64_t(std::max(options.max_running, 1)) * context_length, capped);
  }
  const int64_t blocks = (tokens + block - 1) / block;
  if (blocks > (1 << 30))
    throw std::runtime_error("the KV pool of " + std::to_string(tokens) +
                             " tokens has too many blocks; raise kv_block_size");
  return {block, int(blocks)};
}

std::unique_ptr<Backend> make_backend(const EngineOptions& options, const EngineWeights& weights,
                                      std::shared_ptr<CudaWarmup> warmup,
                                      const KvMemoryFactory& kv_memory) {
  if (options.tensor_parallel_processes)
    throw std::runtime_error(
        "tensor_parallel_processes: the follower processes are started by the worker "
        "(worker/tp/tp_backend.h), not by make_backend");
  const int context = resolve_context_length(options, weights.store->config());
  if (resolve_backend(options.backend) == BackendKind::Cpu) {
    if (weights.store->residence() != Residence::Host)
      throw std::runtime_error("the cpu backend cannot run on GPU-resident (" +
                               std::string(weights.store->backend_name()) + ") weights");
    const int64_t per_token =
        CpuBackend::kv_bytes_per_token(weights.store->config(), options.kv_cache_dtype);
    const KvPoolShape kv = resolve_kv_pool(options, context, per_token);
    if (kv_memory) {
      // A model the server sharded: one pool per rank, each its heads' share of a block,
      // leased from its rank's device (ranked_kv_memory.h). Ranks cut here from one served
      // copy live on the server's one device: one pool of every head, as at TP=1.
      const int ranks = weights.ranks.empty() ? 1 : std::max(1, options.tensor_parallel);
      return std::make_unique<CpuBackend>(
          weights.store, context, kv,
          make_ranked_kv_memory(
              kv_memory, ranks,
              rank_lease(per_token, ranks, kv.block_size, kv.num_blocks, context)),
          options.tensor_parallel, weights.ranks, options.kv_cache_dtype);
    }
    return std::make_unique<CpuBackend>(weights.store, context, kv, nullptr,
                                        options.tensor_parallel, weights.ranks,
                                        options.kv_cache_dtype);
  }
  // tensor_parallel > 1 and a model the server sharded: one process drives every GPU
  // (cuda_tp_backend.h).
  return make_cuda_backend(options, weights, context, std::move(warmup), kv_memory);
}

}  // namespace hearth
