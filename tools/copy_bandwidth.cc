#include "tools/copy_bandwidth.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>

#include "kernels/cuda_check.h"
#include "kernels/cuda_handles.h"
#include "kernels/device_buffer.h"

namespace hearth::bench {

double measure_copy_gbps(size_t bytes, int copies) {
  DeviceBuffer from(bytes), to(bytes);
  HEARTH_CUDA_CHECK(cudaMemset(from.get(), 0, bytes));
  HEARTH_CUDA_CHECK(cudaMemcpy(to.get(), from.get(), bytes, cudaMemcpyDeviceToDevice));
  const CudaEvent start = make_event(cudaEventDefault), stop = make_event(cudaEventDefault);
  float best_ms = 0.0f;
  for (int i = 0; i < copies; ++i) {
    HEARTH_CUDA_CHECK(cudaEventRecord(start.get()));
    HEARTH_CUDA_CHECK(cudaMemcpyAsync(to.get(), from.get(), bytes, cudaMemcpyDeviceToDevice));
    HEARTH_CUDA_CHECK(cudaEventRecord(stop.get()));
    HEARTH_CUDA_CHECK(cudaEventSynchronize(stop.get()));
    float ms = 0.0f;
    HEARTH_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
    best_ms = i == 0 ? ms : std::min(best_ms, ms);
  }
  return 2.0 * double(bytes) / (double(best_ms) * 1e-3) / 1e9;
}

double copy_ceiling_gbps(double given) {
  if (given > 0) return given;
  const double measured = measure_copy_gbps();
  std::fprintf(stderr, "copy ceiling: %.0f GB/s, measured (a 1 GiB device-to-device copy)\n",
               measured);
  return measured;
}

}  // namespace hearth::bench
