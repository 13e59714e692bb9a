// What the two matmul benches (hearth-matmul-bench, hearth-fp8-matmul-bench) set up alike: the
// Llama-3-8B shapes of the batched engine, random bf16 data (never zeros) and the timing rule.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "kernels/cuda_check.h"
#include "kernels/device_buffer.h"

namespace hearth::bench {

struct MatmulShape {
  const char* name;
  int n, k;
  bool swiglu;  // gate and up, each [n, k]
};
inline constexpr MatmulShape kLlama8bShapes[] = {{"qkv", 6144, 4096, false},
                                                 {"o", 4096, 4096, false},
                                                 {"gate+up SwiGLU", 14336, 4096, true},
                                                 {"down", 4096, 14336, false}};

// Grows `ws` to at least `bytes`, zeroed (a matmul workspace: its counters start at zero and the
// kernels leave them so, so a buffer kept from launch to launch needs no clearing).
inline void grow_zeroed(DeviceBuffer& ws, size_t bytes) {
  if (ws.bytes() >= bytes) return;
  ws = DeviceBuffer(bytes);
  HEARTH_CUDA_CHECK(cudaMemset(ws.get(), 0, bytes));
}

// `bytes` of device memory at dst as bf16 values drawn from N(0, 0.02) by `seed`: a pattern of
// 4 Mi values, repeated.
inline void fill_random_bf16(void* dst, size_t bytes, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, 0.02f);
  std::vector<uint16_t> v(4 << 20);
  for (auto& x : v) {
    const float f = d(gen);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    x = uint16_t(bits >> 16);
  }
  const size_t chunk = v.size() * 2;
  for (size_t off = 0; off < bytes; off += chunk)
    HEARTH_CUDA_CHECK(cudaMemcpy(static_cast<char*>(dst) + off, v.data(),
                                 std::min(chunk, bytes - off), cudaMemcpyHostToDevice));
}

// Median of 5 batches of the mean time of body(i) in microseconds, batches of ~10 ms; i counts
// on across batches (callers rotate weights by it).
inline double time_us(cudaStream_t s, const std::function<void(int)>& body) {
  cudaEvent_t e0, e1;
  HEARTH_CUDA_CHECK(cudaEventCreate(&e0));
  HEARTH_CUDA_CHECK(cudaEventCreate(&e1));
  auto batch = [&](int reps, int first) {
    HEARTH_CUDA_CHECK(cudaEventRecord(e0, s));
    for (int i = 0; i < reps; ++i) body(first + i);
    HEARTH_CUDA_CHECK(cudaEventRecord(e1, s));
    HEARTH_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    HEARTH_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    return 1e3 * ms / reps;
  };
  batch(3, 0);
  const double once = batch(2, 3);
  const int reps = int(std::clamp(10000.0 / std::max(once, 1.0), 3.0, 300.0));
  batch(reps, 5);  // settles clocks and caches before the timed batches
  std::vector<double> t;
  for (int i = 0; i < 5; ++i) t.push_back(batch(reps, 5 + i * reps));
  std::sort(t.begin(), t.end());
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return t[2];
}

}  // namespace hearth::bench
