#include "worker/engine/backend_factory.h"

#include <algorithm>
#include <stdexcept>

#include "worker/engine/cpu_backend.h"
#include "worker/engine/cuda_support.h"

namespace hearth {

std::string resolve_backend(const std::string& requested) {
  if (requested != "auto") return requested;
  return cuda_device_available() ? "cuda" : "cpu";
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

std::unique_ptr<Backend> make_backend(const EngineOptions& options, const EngineWeights& weights,
                                      std::shared_ptr<CudaWarmup> warmup) {
  const std::string backend = resolve_backend(options.backend);
  const int context = resolve_context_length(options, weights.store->config());
  if (backend == "cpu") {
    if (weights.store->residence() != Residence::Host)
      throw std::runtime_error("the cpu backend cannot run on GPU-resident (" +
                               std::string(weights.store->backend_name()) + ") weights");
    return std::make_unique<CpuBackend>(weights.store, context);
  }
  return make_cuda_backend(options, weights, context, std::move(warmup));
}

}  // namespace hearth
