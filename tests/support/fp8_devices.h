// Whether the first n GPUs all run the fp8 matmul, for GPU tests with an fp8 case.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "kernels/fp8_matmul.h"

namespace hearth::test {

// Every GPU of the process must run the fp8 matmul (a build without its sm_90a code fails).
inline bool fp8_devices(int n) {
  for (int d = 0; d < n; ++d) {
    int major = 0, minor = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, d);
    if (!kernels::fp8_matmul_refusal(major, minor).empty()) return false;
  }
  EXPECT_TRUE(kernels::fp8_matmul_available()) << "sm_90 GPUs, but no fp8 kernels in the build";
  return true;
}

}  // namespace hearth::test
