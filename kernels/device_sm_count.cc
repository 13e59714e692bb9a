#include "kernels/device_sm_count.h"

#include <cuda_runtime.h>

#include <atomic>

namespace hearth::kernels {

namespace {

constexpr int kCachedDevices = 64;  // more devices than this are asked every time
constexpr int kFallbackSms = 132;

int query_sm_count(int device) {
  int n = kFallbackSms;
  if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
    n = kFallbackSms;
  return n;
}

}  // namespace

int device_sm_count() {
  // Launchers call this on every launch, from any thread: a lock-free slot per device, 0 until
  // filled (two threads racing both store the same value).
  static std::atomic<int> cached[kCachedDevices] = {};
  int device = 0;
  cudaGetDevice(&device);
  if (device < 0 || device >= kCachedDevices) return query_sm_count(device);
  int n = cached[device].load(std::memory_order_relaxed);
  if (n == 0) {
    n = query_sm_count(device);
    cached[device].store(n, std::memory_order_relaxed);
  }
  return n;
}

}  // namespace hearth::kernels
