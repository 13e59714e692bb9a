// hearth-fp8-matmul-bench: the fp8 wgmma matmul (kernels/fp8_matmul.h) at the Llama-3-8B shapes,
// every row count from decode to prefill, each tiling with --all-tiles, next to the bf16 wgmma
// matmul on the same shapes. Weights rotate through an arena larger than L2; codes are random
// finite e4m3. Prints a markdown table (the numbers behind kernels/notes/fp8_matmul.md).
#include <CLI/CLI.hpp>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda_check.h"
#include "kernels/device_buffer.h"
#include "kernels/fp8_matmul.h"
#include "kernels/fp8_quantize.h"
#include "kernels/wgmma_matmul.h"

namespace {

using namespace hearth;
using kernels::Half;

void fill(void* dst, size_t bytes, const std::vector<uint8_t>& pattern) {
  for (size_t off = 0; off < bytes; off += pattern.size())
    HEARTH_CUDA_CHECK(cudaMemcpy(static_cast<char*>(dst) + off, pattern.data(),
                                 std::min(pattern.size(), bytes - off), cudaMemcpyHostToDevice));
}

// Median of 5 batches of the mean time of body(i) in microseconds, batches of ~10 ms.
double time_us(cudaStream_t s, const std::function<void(int)>& body) {
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
  batch(reps, 5);
  std::vector<double> t;
  for (int i = 0; i < 5; ++i) t.push_back(batch(reps, 5 + i * reps));
  std::sort(t.begin(), t.end());
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return t[2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "hearth-fp8-matmul-bench: the fp8 (e4m3) wgmma matmul vs the bf16 wgmma matmul at the 8B "
      "shapes, every row count"};
  std::vector<int> ms{1, 8, 32, 64, 128, 256, 512, 2048};
  bool all_tiles = false;
  double peak = 1979.0, gbps_peak = 3020.0;
  app.add_option("--ms", ms, "row counts (a,b,...)")->delimiter(',');
  app.add_flag("--all-tiles", all_tiles, "also time every fp8 tiling");
  app.add_option("--peak-tflops", peak, "fp8 rate percentages are of (H100 SXM dense: 1979)");
  app.add_option("--peak-gbps", gbps_peak, "bandwidth percentages are of (H100 SXM: 3020)");
  CLI11_PARSE(app, argc, argv);
  if (!kernels::fp8_matmul_available()) {
    std::fprintf(stderr, "no compute-capability 9.0 device: the fp8 wgmma needs sm_90a\n");
    return 1;
  }
  struct Shape {
    const char* name;
    int n, k;
    bool swiglu;
  };
  const Shape shapes[] = {{"qkv", 6144, 4096, false},
                          {"o", 4096, 4096, false},
                          {"gate+up SwiGLU", 14336, 4096, true},
                          {"down", 4096, 14336, false}};
  cudaStream_t stream;
  HEARTH_CUDA_CHECK(cudaStreamCreate(&stream));
  const int max_m = *std::max_element(ms.begin(), ms.end());
  const size_t arena_bytes = size_t(1200) << 20;  // bf16 weights; fp8 use half of it
  DeviceBuffer arena(arena_bytes), a16(size_t(max_m) * 14336 * 2), a8(size_t(max_m) * 14336),
      a_scales(size_t(max_m) * 4), w_scales(2 * 14336 * 4), out(size_t(max_m) * 28672 * 4);
  {
    std::mt19937 gen(7);
    std::normal_distribution<float> d(0.0f, 0.02f);
    std::vector<uint8_t> bf16(8 << 20);
    for (size_t i = 0; i < bf16.size(); i += 2) {
      const float f = d(gen);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      bf16[i] = uint8_t(bits >> 16), bf16[i + 1] = uint8_t(bits >> 24);
    }
    fill(arena.get(), arena_bytes, bf16);
    fill(a16.get(), a16.bytes(), bf16);
    const std::vector<float> scales(2 * 14336, 0.02f / 448);
    HEARTH_CUDA_CHECK(
        cudaMemcpy(w_scales.get(), scales.data(), w_scales.bytes(), cudaMemcpyHostToDevice));
  }
  // The fp8 arena: the bf16 arena's first half quantized per row (real codes, no NaN).
  const size_t fp8_bytes = arena_bytes / 2;
  DeviceBuffer arena8(fp8_bytes), arena8_scales(fp8_bytes / 4096 * 4);
  {
    kernels::Fp8QuantizeArgs q;
    q.in = arena.get(), q.rows = int(fp8_bytes / 4096), q.k = 4096;
    q.codes = arena8.get<uint8_t>(), q.scales = arena8_scales.get<float>();
    kernels::fp8_quantize_rows(Half::BF16, q, stream);
    q.in = a16.get(), q.rows = max_m, q.k = 14336, q.codes = a8.get<uint8_t>();
    q.scales = a_scales.get<float>();
    kernels::fp8_quantize_rows(Half::BF16, q, stream);
  }
  std::printf(
      "| shape | N x K | M | fp8 auto TFLOP/s | %% of %.0f | fp8 GB/s | %% of %.0f | fp8 us | bf16 "
      "wgmma us | bf16 / fp8 time | tilings (us) "
      "|\n|---|---|---|---|---|---|---|---|---|---|---|\n",
      peak, gbps_peak);
  for (const Shape& s : shapes) {
    const int mats = s.swiglu ? 2 : 1;
    const size_t w8 = size_t(s.n) * s.k * mats, w16 = 2 * w8;
    const int copies8 = int(std::clamp<size_t>(fp8_bytes / w8, 1, 16));
    const int copies16 = int(std::clamp<size_t>(arena_bytes / w16, 1, 16));
    const kernels::MatmulEpilogue e =
        s.swiglu ? kernels::MatmulEpilogue::SwiGLU : kernels::MatmulEpilogue::StoreHalf;
    for (int m : ms) {
      const double flops = 2.0 * m * s.n * s.k * mats;
      const double bytes = double(w8) + double(m) * s.k + 2.0 * m * s.n * mats;
      auto fp8_us = [&](kernels::Fp8Tiles t) {
        return time_us(stream, [&](int i) {
          const uint8_t* w = arena8.get<uint8_t>() + (i % copies8) * w8;
          kernels::Fp8MatmulArgs args;
          args.a = a8.get<uint8_t>(), args.a_scale = a_scales.get<float>();
          args.w = w, args.w_scale = w_scales.get<float>();
          if (s.swiglu) args.w_up = w + w8 / 2, args.w_up_scale = w_scales.get<float>() + s.n;
          args.m = m, args.n = s.n, args.k = s.k, args.out = out.get();
          kernels::fp8_matmul(Half::BF16, e, args, t, stream);
        });
      };
      const double auto_us = fp8_us(kernels::Fp8Tiles::Auto);
      std::string tilings;
      if (all_tiles)
        for (kernels::Fp8Tiles t : kernels::kAllFp8Tiles)
          tilings += std::string(kernels::fp8_tiles_name(t)) + " " +
                     std::to_string(int(fp8_us(t) * 10) / 10.0).substr(0, 6) + "; ";
      const double bf16_us = time_us(stream, [&](int i) {
        const char* w = static_cast<const char*>(arena.get()) + (i % copies16) * w16;
        kernels::MatmulArgs args;
        args.a = a16.get(), args.w = w, args.m = m, args.n = s.n, args.k = s.k;
        if (s.swiglu) args.w_up = w + w16 / 2;
        args.out = out.get();
        kernels::wgmma_matmul(Half::BF16, e, args, kernels::WgmmaTiles::Auto, stream);
      });
      HEARTH_CUDA_CHECK(cudaStreamSynchronize(stream));
      const double tf = flops / auto_us / 1e6, gbps = bytes / auto_us / 1e3;
      std::printf("| %s | %dx%d | %d | %.1f | %.1f%% | %.0f | %.1f%% | %.1f | %.1f | %.2f | %s |\n",
                  s.name, s.n * mats, s.k, m, tf, 100 * tf / peak, gbps, 100 * gbps / gbps_peak,
                  auto_us, bf16_us, bf16_us / auto_us, tilings.c_str());
      std::fflush(stdout);
    }
  }
  HEARTH_CUDA_CHECK(cudaStreamDestroy(stream));
  return 0;
}
