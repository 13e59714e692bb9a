// hearth-fp8-matmul-bench: the fp8 wgmma matmul (kernels/fp8_matmul.h) at the Llama-3-8B shapes,
// every row count from decode to prefill, each tiling with --all-tiles, next to the bf16 wgmma
// matmul on the same shapes. Weights rotate through an arena larger than L2; codes are random
// finite e4m3. Prints a markdown table (the numbers behind kernels/notes/fp8_matmul.md).
#include <CLI/CLI.hpp>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/cuda_check.h"
#include "kernels/device_buffer.h"
#include "kernels/fp8_matmul.h"
#include "kernels/fp8_quantize.h"
#include "kernels/wgmma_matmul.h"
#include "tools/matmul_bench_setup.h"

using namespace hearth;
using bench::time_us;
using kernels::Half;

int main(int argc, char** argv) {
  CLI::App app{
      "hearth-fp8-matmul-bench: the fp8 (e4m3) wgmma matmul vs the bf16 wgmma matmul at the 8B "
      "shapes, every row count"};
  std::vector<int> ms{1, 8, 32, 64, 128, 256, 512, 2048};
  bool all_tiles = false;
  std::string only_shape;
  double peak = 1979.0, gbps_peak = 3020.0;
  app.add_option("--ms", ms, "row counts (a,b,...)")->delimiter(',');
  app.add_flag("--all-tiles", all_tiles, "also time every fp8 tiling");
  app.add_option("--shape", only_shape,
                 "only the shape whose name starts with this (qkv, o, gate, down): short runs, "
                 "profiles");
  app.add_option("--peak-tflops", peak, "fp8 rate percentages are of (H100 SXM dense: 1979)");
  app.add_option("--peak-gbps", gbps_peak, "bandwidth percentages are of (H100 SXM: 3020)");
  CLI11_PARSE(app, argc, argv);
  if (!kernels::fp8_matmul_available()) {
    std::fprintf(stderr, "no compute-capability 9.0 device: the fp8 wgmma needs sm_90a\n");
    return 1;
  }
  cudaStream_t stream;
  HEARTH_CUDA_CHECK(cudaStreamCreate(&stream));
  const int max_m = *std::max_element(ms.begin(), ms.end());
  const size_t arena_bytes = size_t(1200) << 20;  // bf16 weights; fp8 use half of it
  DeviceBuffer arena(arena_bytes), a16(size_t(max_m) * 14336 * 2), a8(size_t(max_m) * 14336),
      a_scales(size_t(max_m) * 4), w_scales(2 * 14336 * 4), out(size_t(max_m) * 28672 * 4),
      ws_sliced;
  bench::fill_random_bf16(arena.get(), arena_bytes, 7);
  bench::fill_random_bf16(a16.get(), a16.bytes(), 7);
  const std::vector<float> scales(2 * 14336, 0.02f / 448);
  HEARTH_CUDA_CHECK(
      cudaMemcpy(w_scales.get(), scales.data(), w_scales.bytes(), cudaMemcpyHostToDevice));
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
  for (const bench::MatmulShape& s : bench::kLlama8bShapes) {
    if (!std::string_view(s.name).starts_with(only_shape)) continue;
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
          args.a_rows_readable = int(a8.bytes() / size_t(s.k));
          kernels::fp8_matmul(Half::BF16, e, args, t, stream);
        });
      };
      const double auto_us = fp8_us(kernels::Fp8Tiles::Auto);
      std::string tilings;
      if (all_tiles)
        for (kernels::Fp8Tiles t : kernels::kAllFp8Tiles)
          tilings += std::string(kernels::fp8_tiles_name(t)) + " " +
                     std::to_string(int(fp8_us(t) * 10) / 10.0).substr(0, 6) + "; ";
      // bf16's long K is summed in slices that meet in a workspace (wgmma_matmul_k_slices).
      bench::grow_zeroed(ws_sliced, kernels::wgmma_matmul_workspace_bytes(m, s.n, s.k, s.swiglu));
      const double bf16_us = time_us(stream, [&](int i) {
        const char* w = static_cast<const char*>(arena.get()) + (i % copies16) * w16;
        kernels::MatmulArgs args;
        args.a = a16.get(), args.w = w, args.m = m, args.n = s.n, args.k = s.k;
        args.a_rows_readable = int(a16.bytes() / (size_t(s.k) * 2));
        if (s.swiglu) args.w_up = w + w16 / 2;
        args.out = out.get();
        args.workspace = ws_sliced.get(), args.workspace_bytes = ws_sliced.bytes();
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
