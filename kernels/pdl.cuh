// Programmatic dependent launch (Hopper): a kernel launched with it may start while the kernel
// before it in the stream is still finishing. It must call wait_for_producer() before reading
// anything that kernel wrote; it calls allow_dependents_early() so the kernel after it can be
// scheduled onto SMs as they free up. Both are no-ops when launched the ordinary way.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda_check.h"

namespace hearth::kernels {

__device__ __forceinline__ void wait_for_producer() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void allow_dependents_early() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}

// Asks the copy engine to bring `bytes` (a multiple of 16) at `p` into L2 without waiting.
// Used on weights before wait_for_producer(): HBM keeps streaming while the producer finishes.
__device__ __forceinline__ void prefetch_l2(const void* p, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#endif
}

// Launches `kernel` with the programmatic stream serialization attribute.
template <typename... KernelArgs, typename... Args>
void launch_pdl(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem,
                cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attr;
  config.numAttrs = 1;
  HEARTH_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

}  // namespace hearth::kernels
