// How a worker's engine is built: the backend, its context and the kernel choices. They belong
// to the worker, not to a request; those that change numerics are here so a proof run can
// show them.
#pragma once

#include <string>

namespace hearth {

struct EngineOptions {
  std::string backend = "auto";  // auto | cpu | cuda (auto: cuda when a GPU is present)
  int context_length = 0;        // 0: the model's maximum, capped at 4096

  // CUDA engine options.
  bool cuda_graphs = true;
  std::string kv_cache_dtype = "auto";        // auto (the weights' type) | bf16 | f16
  std::string weights_layout = "per-tensor";  // per-tensor | packed
  std::string decode_gemv = "hearth";         // hearth | cublas
};

}  // namespace hearth
