// Shared helpers for GPU tests: skip without a device (or with too few), random inputs rounded to
// 16 bits, device upload/download, poisoned outputs and error norms.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/device_buffer.h"
#include "kernels/ops.h"
#include "weight-server/model/dtype.h"

namespace hearth::test {

// CUDA devices this process sees: 0 without a driver or a device.
inline int gpu_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

inline bool have_gpu() {
  return gpu_count() > 0;
}

#define HEARTH_REQUIRE_GPU() \
  if (!::hearth::test::have_gpu()) GTEST_SKIP() << "no CUDA device on this machine"

// Multi-GPU cases (tensor-parallel ranks, all-reduce): skip below n devices, saying how many.
#define HEARTH_REQUIRE_GPUS(n)                                          \
  if (::hearth::test::gpu_count() < (n))                                \
  GTEST_SKIP() << "needs " << (n) << " CUDA devices; this machine has " \
               << ::hearth::test::gpu_count()

inline uint16_t to_half(float v, kernels::Half t) {
  return t == kernels::Half::BF16 ? f32_to_bf16(v) : f32_to_f16(v);
}
inline float from_half(uint16_t v, kernels::Half t) {
  return t == kernels::Half::BF16 ? bf16_to_f32(v) : f16_to_f32(v);
}

// Fresh random values every run (seeded from the clock unless HEARTH_TEST_SEED is set), rounded
// to 16 bits when `t` is given, so the reference sees exactly the kernel's inputs.
inline std::mt19937& rng() {
  static std::mt19937 gen = [] {
    const char* s = std::getenv("HEARTH_TEST_SEED");
    const unsigned seed = s ? unsigned(std::atoi(s)) : std::random_device{}();
    std::printf("random seed %u (set HEARTH_TEST_SEED to repeat)\n", seed);
    return std::mt19937(seed);
  }();
  return gen;
}

inline std::vector<float> random_floats(size_t n, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng());
  return v;
}

inline std::vector<float> rounded(std::vector<float> v, kernels::Half t) {
  for (auto& x : v) x = from_half(to_half(x, t), t);
  return v;
}

template <typename T>
DeviceBuffer upload(const std::vector<T>& v) {
  DeviceBuffer b(v.size() * sizeof(T));
  HEARTH_CUDA_CHECK(cudaMemcpy(b.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return b;
}

inline DeviceBuffer upload_half(const std::vector<float>& v, kernels::Half t) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = to_half(v[i], t);
  return upload(h);
}

// A device buffer filled with NaN (0xFF bytes) so unwritten outputs show.
inline DeviceBuffer poisoned(size_t bytes) {
  DeviceBuffer b(bytes);
  HEARTH_CUDA_CHECK(cudaMemset(b.get(), 0xFF, bytes));
  return b;
}

// n values of T from the device, once the work queued before has finished.
template <typename T>
std::vector<T> download(const DeviceBuffer& b, size_t n) {
  std::vector<T> v(n);
  HEARTH_CUDA_CHECK(cudaDeviceSynchronize());
  HEARTH_CUDA_CHECK(cudaMemcpy(v.data(), b.get(), n * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}

inline std::vector<float> download_f32(const DeviceBuffer& b, size_t n) {
  return download<float>(b, n);
}

inline std::vector<float> download_half(const DeviceBuffer& b, size_t n, kernels::Half t) {
  std::vector<uint16_t> h(n);
  HEARTH_CUDA_CHECK(cudaDeviceSynchronize());
  HEARTH_CUDA_CHECK(cudaMemcpy(h.data(), b.get(), n * 2, cudaMemcpyDeviceToHost));
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = from_half(h[i], t);
  return v;
}

// ||out - ref|| / ||ref||, and a check that no output is NaN (unwritten).
inline double relative_error(const std::vector<float>& out, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(out[i])) return INFINITY;
    num += (double(out[i]) - ref[i]) * (double(out[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

inline const char* name(kernels::Half t) {
  return t == kernels::Half::BF16 ? "bf16" : "f16";
}

// Relative error expected from rounding a result to the 16-bit type (plus fp32 slack).
inline double half_tolerance(kernels::Half t) {
  return t == kernels::Half::BF16 ? 8e-3 : 2e-3;
}

}  // namespace hearth::test
