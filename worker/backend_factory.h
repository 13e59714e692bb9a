// Chooses and builds the engine a profile asks for: `cpu`, `cuda`, or `auto` (cuda when a GPU
// is present, else cpu).
#pragma once

#include <memory>
#include <string>

#include "worker/backend.h"
#include "worker/cuda_support.h"
#include "worker/profile.h"
#include "worker/worker_model.h"

namespace hearth {

// "cpu" or "cuda": what `auto` means on this machine.
std::string resolve_backend(const std::string& requested);

// The context length a profile gets on a model: its own, else the model's maximum (capped at
// 4096, and at a Mistral sliding window, which hearth does not apply).
int resolve_context_length(const Profile& profile, const ModelConfig& config);

// Throws std::runtime_error with a clear message when the backend cannot run here (e.g.
// "no CUDA device was found"). `warmup`, from start_cuda_warmup, is used by the cuda backend.
std::unique_ptr<Backend> make_backend(const Profile& profile, const WorkerModel& model,
                                      std::shared_ptr<CudaWarmup> warmup = nullptr);

}  // namespace hearth
