// A kernel's function attributes (cudaFuncSetAttribute: its dynamic shared memory) belong to the
// current device's context, so a launcher that sets them once per process breaks on the second
// GPU of a tensor-parallel process. first_on_this_device() says whether the current device is
// new to `seen` (a bit per device), marking it: the caller then sets the attribute.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

namespace hearth::kernels {

inline bool first_on_this_device(std::atomic<uint64_t>& seen) {
  int device = 0;
  cudaGetDevice(&device);
  // Devices past 63 are configured every time (harmless: the call is idempotent).
  if (device < 0 || device >= 64) return true;
  const uint64_t bit = uint64_t(1) << device;
  // Two threads racing both set the attribute: the same value, harmless.
  return (seen.fetch_or(bit, std::memory_order_relaxed) & bit) == 0;
}

}  // namespace hearth::kernels
