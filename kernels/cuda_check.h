// Error checking for CUDA runtime and cuBLAS calls: every failure becomes a std::runtime_error
// that names the call, the file and line, and CUDA's own description.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace hearth {

[[noreturn]] inline void throw_cuda_error(cudaError_t err, const char* what, const char* file,
                                          int line) {
  throw std::runtime_error(std::string("CUDA error in ") + what + " (" + file + ":" +
                           std::to_string(line) + "): " + cudaGetErrorString(err));
}

}  // namespace hearth

#define HEARTH_CUDA_CHECK(expr)                                           \
  do {                                                                    \
    cudaError_t hearth_err_ = (expr);                                     \
    if (hearth_err_ != cudaSuccess)                                       \
      ::hearth::throw_cuda_error(hearth_err_, #expr, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: launch-configuration errors surface here, not at the next sync.
#define HEARTH_CUDA_CHECK_LAUNCH() HEARTH_CUDA_CHECK(cudaGetLastError())
