// The seam between the worker and the optional CUDA engine. Built without CUDA, these say so;
// built with it, they never require a GPU or driver just to start.
#pragma once

#include <memory>

#include "worker/engine/backend.h"
#include "worker/engine/engine_options.h"
#include "worker/engine/engine_weights.h"
#include "worker/engine/kv_memory.h"

namespace hearth {

// True when a usable CUDA device and driver are present.
bool cuda_device_available();

// Starts the CUDA engine's slow first steps (context, cuBLASLt and its set-up) on a helper
// thread for weights of `type` on `device`; make_cuda_backend collects them. Null when built
// without CUDA or when the weights are not 16-bit.
class CudaWarmup;
std::shared_ptr<CudaWarmup> start_cuda_warmup(int device, DType type);

// Throws std::runtime_error ("no CUDA device was found", "built without CUDA", ...) when the
// CUDA engine cannot run here. With `kv_memory` the batched engine's pool is leased (served
// mode); the single-sequence engine keeps its own cache.
std::unique_ptr<Backend> make_cuda_backend(const EngineOptions& options,
                                           const EngineWeights& weights, int context_length,
                                           std::shared_ptr<CudaWarmup> warmup = nullptr,
                                           const KvMemoryFactory& kv_memory = nullptr);

}  // namespace hearth
