// Chooses and builds the engine the engine options ask for: `cpu`, `cuda`, or `auto` (cuda when a
// GPU is present, else cpu).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "worker/engine/backend.h"
#include "worker/engine/cuda_support.h"
#include "worker/engine/engine_options.h"
#include "worker/engine/engine_weights.h"

namespace hearth {

// Cpu or Cuda: what Auto means on this machine.
BackendKind resolve_backend(BackendKind requested);

// The context length an engine gets on a model: its own, else the model's maximum (capped at
// 4096, and at a Mistral sliding window, which hearth does not apply).
int resolve_context_length(const EngineOptions& options, const ModelConfig& config);

// The KV pool a backend gets, the one sizing policy of every backend: EngineOptions'
// kv_pool_tokens or kv_pool_gb (at most one of them and kv_pool_fraction), else
//  - on a GPU (`device_free_bytes`: what is free once everything but the pool is allocated):
//    kv_pool_fraction of it (default 0.9), at most max_running full contexts, and an error when
//    less than one full context fits;
//  - on the CPU: enough for max_running full contexts, at most 1 GiB, never less than one full
//    context (kv_pool_fraction is refused).
// `bytes_per_token` is what one position costs in the backend's KV layout.
KvPoolShape resolve_kv_pool(const EngineOptions& options, int context_length,
                            int64_t bytes_per_token,
                            std::optional<size_t> device_free_bytes = std::nullopt);

// Throws std::runtime_error with a clear message when the backend cannot run here (e.g.
// "no CUDA device was found"). `warmup`, from start_cuda_warmup, is used by the cuda backend.
// With `kv_memory` the pool of the cpu and batched cuda backends is leased memory that grows and
// shrinks (KvMemoryFactory, kv_memory.h); the single-sequence cuda backend keeps its own.
std::unique_ptr<Backend> make_backend(const EngineOptions& options, const EngineWeights& weights,
                                      std::shared_ptr<CudaWarmup> warmup = nullptr,
                                      const KvMemoryFactory& kv_memory = nullptr);

}  // namespace hearth
