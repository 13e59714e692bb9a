// Makes a CUDA device current for a scope and restores the caller's device after: the owner a
// multi-GPU process (tensor-parallel ranks) uses around every per-device call. current_device()
// names the device this thread's calls go to now.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda_check.h"

namespace hearth::kernels {

inline int current_device() {
  int device = 0;
  HEARTH_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    HEARTH_CUDA_CHECK(cudaGetDevice(&previous_));
    HEARTH_CUDA_CHECK(cudaSetDevice(device));
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  ~DeviceScope() { cudaSetDevice(previous_); }

 private:
  int previous_ = 0;
};

}  // namespace hearth::kernels
