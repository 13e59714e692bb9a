#include "worker/backend_factory.h"

#include <algorithm>
#include <stdexcept>

#include "worker/cpu_backend.h"
#include "worker/cuda_support.h"

namespace hearth {

std::string resolve_backend(const std::string& requested) {
  if (requested != "auto") return requested;
  return cuda_device_available() ? "cuda" : "cpu";
}

int resolve_context_length(const Profile& profile, const ModelConfig& config) {
  int limit = config.max_position;
  if (config.sliding_window > 0) limit = std::min(limit, config.sliding_window);
  if (profile.context_length > 0) {
    if (profile.context_length > limit)
      throw std::runtime_error("context_length " + std::to_string(profile.context_length) +
                               " exceeds the model's limit of " + std::to_string(limit));
    return profile.context_length;
  }
  return std::min(limit, 4096);
}

std::unique_ptr<Backend> make_backend(const Profile& profile, const WorkerModel& model,
                                      std::shared_ptr<CudaWarmup> warmup) {
  const std::string backend = resolve_backend(profile.backend);
  const int context = resolve_context_length(profile, model.store->config());
  if (backend == "cpu") {
    if (model.store->residence() != Residence::Host)
      throw std::runtime_error("the cpu backend cannot run on GPU-resident (" +
                               std::string(model.store->backend_name()) + ") weights");
    return std::make_unique<CpuBackend>(model.store, context);
  }
  return make_cuda_backend(profile, model, context, std::move(warmup));
}

}  // namespace hearth
