// hearth-matmul-bench: the invariant matmuls (wgmma, mma.sync) against cuBLASLt at the Llama-3-8B
// shapes of the batched engine, every row count from decode to prefill. Weights rotate through
// an arena larger than L2; inputs are random (never zeros). Prints a markdown table; --json
// writes every number.
#include <CLI/CLI.hpp>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/batch_ops.h"
#include "kernels/cuda_check.h"
#include "kernels/device_buffer.h"
#include "kernels/gemm.h"
#include "kernels/wgmma_matmul.h"
#include "tools/matmul_bench_setup.h"

namespace {

using namespace hearth;
using bench::time_us;
using kernels::Half;

// q, k and v of the 8B (4,096 + 1,024 + 1,024 rows of 4,096, fp32 out as in the engine): three
// launches against one launch over the three weights (MatmulArgs::more). Same bits; the one
// launch has enough tiles to fill the GPU.
void qkv_table(const std::vector<int>& ms, const DeviceBuffer& arena, const DeviceBuffer& a,
               const DeviceBuffer& out, cudaStream_t stream) {
  constexpr int kQ = 4096, kKv = 1024, kK = 4096;
  const size_t q_bytes = size_t(kQ) * kK * 2, kv_bytes = size_t(kKv) * kK * 2;
  const size_t set_bytes = q_bytes + 2 * kv_bytes;
  const int copies = int(std::clamp<size_t>(arena.bytes() / set_bytes, 1, 16));
  auto weights = [&](int i) { return static_cast<char*>(arena.get()) + (i % copies) * set_bytes; };
  std::printf(
      "\n| q/k/v 4096+1024+1024 x 4096, fp32 out | M | three launches us | one launch us "
      "| speedup |\n|---|---|---|---|---|\n");
  for (int m : ms) {
    char* o = static_cast<char*>(out.get());
    void* q_out = o;
    void* k_out = o + size_t(m) * kQ * 4;
    void* v_out = o + size_t(m) * (kQ + kKv) * 4;
    auto args_for = [&](const void* w, int n, void* dst) {
      kernels::MatmulArgs args;
      args.a = a.get(), args.w = w, args.m = m, args.n = n, args.k = kK, args.out = dst;
      args.a_rows_readable = int(a.bytes() / (size_t(kK) * 2));  // as the engine's step buffers
      return args;
    };
    const auto e = kernels::MatmulEpilogue::StoreF32;
    const auto t = kernels::WgmmaTiles::Auto;
    const double three_us = time_us(stream, [&](int i) {
      char* w = weights(i);
      kernels::wgmma_matmul(Half::BF16, e, args_for(w, kQ, q_out), t, stream);
      kernels::wgmma_matmul(Half::BF16, e, args_for(w + q_bytes, kKv, k_out), t, stream);
      kernels::wgmma_matmul(Half::BF16, e, args_for(w + q_bytes + kv_bytes, kKv, v_out), t, stream);
    });
    const double one_us = time_us(stream, [&](int i) {
      char* w = weights(i);
      kernels::MatmulArgs args = args_for(w, kQ, q_out);
      args.more[0] = {w + q_bytes, nullptr, k_out, kKv};
      args.more[1] = {w + q_bytes + kv_bytes, nullptr, v_out, kKv};
      kernels::wgmma_matmul(Half::BF16, e, args, t, stream);
    });
    std::printf("| | %d | %.1f | %.1f | %.2f |\n", m, three_us, one_us, three_us / one_us);
    std::fflush(stdout);
  }
}

// q, k and v of one tensor-parallel shard of the 8B (4,096 / tp + 2 x 1,024 / tp rows of 4,096)
// in one launch, by each four-box decode tile and by Auto: the narrow tiles against the 32-row
// tile the rule took before they existed (issue 23/26). Same bits; a speed table.
void qkv_shard_table(int tp, const std::vector<int>& ms, const DeviceBuffer& arena,
                     const DeviceBuffer& a, const DeviceBuffer& out, cudaStream_t stream) {
  const int q = 4096 / tp, kv = 1024 / tp, k = 4096;
  const size_t q_bytes = size_t(q) * k * 2, kv_bytes = size_t(kv) * k * 2;
  const size_t set_bytes = q_bytes + 2 * kv_bytes;
  const int copies = int(std::clamp<size_t>(arena.bytes() / set_bytes, 1, 16));
  using kernels::WgmmaTiles;
  const WgmmaTiles tilings[] = {WgmmaTiles::Auto,           WgmmaTiles::M16N48DeepK256,
                                WgmmaTiles::M16N32DeepK256, WgmmaTiles::M16N24DeepK256,
                                WgmmaTiles::M16N16DeepK256, WgmmaTiles::M16N8DeepK256};
  std::printf("\n| q/k/v %d+%d+%d x %d (TP=%d), one launch, fp32 out | M |", q, kv, kv, k, tp);
  for (WgmmaTiles t : tilings) std::printf(" %s us |", kernels::wgmma_tiles_name(t));
  std::printf("\n|---|---|---|---|---|---|---|---|\n");
  for (int m : ms) {
    char* o = static_cast<char*>(out.get());
    std::printf("| | %d |", m);
    for (WgmmaTiles t : tilings) {
      const double us = time_us(stream, [&](int i) {
        char* w = static_cast<char*>(arena.get()) + (i % copies) * set_bytes;
        kernels::MatmulArgs args;
        args.a = a.get(), args.w = w, args.m = m, args.n = q, args.k = k, args.out = o;
        args.a_rows_readable = int(a.bytes() / (size_t(k) * 2));
        args.more[0] = {w + q_bytes, nullptr, o + size_t(m) * q * 4, kv};
        args.more[1] = {w + q_bytes + kv_bytes, nullptr, o + size_t(m) * (q + kv) * 4, kv};
        kernels::wgmma_matmul(Half::BF16, kernels::MatmulEpilogue::StoreF32, args, t, stream);
      });
      std::printf(" %.1f |", us);
    }
    std::printf("\n");
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "hearth-matmul-bench: invariant matmuls (wgmma + TMA, mma.sync) vs cuBLASLt at the 8B "
      "shapes, bf16, every row count"};
  std::vector<int> ms{1, 8, 32, 64, 128, 256, 512, 2048};
  bool all_tiles = false, qkv_only = false;
  std::string only_shape;
  std::vector<int> shard_tps;
  double peak = 796.0;
  std::string json_path;
  app.add_option("--ms", ms, "row counts (a,b,...)")->delimiter(',');
  app.add_flag("--all-tiles", all_tiles, "also time every wgmma tiling");
  std::string halves_at = "auto";
  app.add_option("--k-halves-at", halves_at,
                 "where a long K's two halves run (down): auto (the rule), one (one block sums "
                 "both), two (a block each)")
      ->check(CLI::IsMember({"auto", "one", "two"}));
  app.add_flag("--qkv-only", qkv_only, "only the q/k/v table: three launches against one");
  app.add_option("--shape", only_shape,
                 "only the shape whose name starts with this (qkv, o, gate, down): short runs, "
                 "profiles");
  app.add_option("--peak-tflops", peak, "the rate percentages are of (H100 SXM bf16 dense: 796)");
  app.add_option("--json", json_path, "write every number here");
  app.add_option("--qkv-tp", shard_tps,
                 "also time q/k/v shards of these tensor-parallel sizes (1, 2, 4, 8) by each "
                 "four-box decode tile");
  CLI11_PARSE(app, argc, argv);
  const kernels::KHalvesAt at = halves_at == "one"   ? kernels::KHalvesAt::InOneBlock
                                : halves_at == "two" ? kernels::KHalvesAt::OnTwoBlocks
                                                     : kernels::KHalvesAt::Auto;
  if (!kernels::wgmma_matmul_available()) {
    std::fprintf(stderr, "no compute-capability 9.0 device: wgmma needs sm_90a\n");
    return 1;
  }
  cudaStream_t stream;
  HEARTH_CUDA_CHECK(cudaStreamCreate(&stream));
  const int max_m = *std::max_element(ms.begin(), ms.end());
  const size_t arena_bytes = size_t(1200) << 20;
  DeviceBuffer arena(arena_bytes), a(size_t(max_m) * 14336 * 2), out(size_t(max_m) * 28672 * 4),
      ws_old, ws_sliced;
  bench::fill_random_bf16(arena.get(), arena_bytes, 7);
  bench::fill_random_bf16(a.get(), a.bytes(), 11);
  kernels::Gemm cublas(Half::BF16);
  std::ofstream json;
  if (!json_path.empty()) json.open(json_path);
  std::printf(
      "| shape | N x K | M | wgmma (auto) TFLOP/s | %% of %.0f | cuBLASLt | old mma.sync | "
      "wgmma / cuBLASLt | wgmma us | auto again | best tiling "
      "|\n|---|---|---|---|---|---|---|---|---|---|---|\n",
      peak);
  // SwiGLU: cuBLASLt runs gate and up as one [2n, k].
  for (const bench::MatmulShape& s : bench::kLlama8bShapes) {
    if (qkv_only) break;
    if (!std::string_view(s.name).starts_with(only_shape)) continue;
    const int mats = s.swiglu ? 2 : 1;
    const size_t w_bytes = size_t(s.n) * s.k * 2 * mats;
    const int copies = int(std::clamp<size_t>(arena_bytes / w_bytes, 1, 16));
    auto weight = [&](int i) { return static_cast<char*>(arena.get()) + (i % copies) * w_bytes; };
    for (int m : ms) {
      const double flops = 2.0 * m * s.n * s.k * mats;
      const kernels::MatmulEpilogue e =
          s.swiglu ? kernels::MatmulEpilogue::SwiGLU : kernels::MatmulEpilogue::StoreHalf;
      // A long K is summed in slices that meet in a workspace (wgmma_matmul_k_slices).
      bench::grow_zeroed(ws_sliced, kernels::wgmma_matmul_workspace_bytes(m, s.n, s.k, s.swiglu));
      auto args_for = [&](int i) {
        kernels::MatmulArgs args;
        args.a = a.get(), args.w = weight(i), args.m = m, args.n = s.n, args.k = s.k;
        args.a_rows_readable = int(a.bytes() / (size_t(s.k) * 2));
        if (s.swiglu) args.w_up = weight(i) + w_bytes / 2;
        args.out = out.get();
        args.workspace = ws_sliced.get(), args.workspace_bytes = ws_sliced.bytes();
        return args;
      };
      auto wgmma_us = [&](kernels::WgmmaTiles t) {
        return time_us(stream, [&](int i) {
          kernels::wgmma_matmul(Half::BF16, e, args_for(i), t, stream, at);
        });
      };
      const double auto_us = wgmma_us(kernels::WgmmaTiles::Auto);
      double best_us = auto_us;
      const char* best = "auto";
      std::string tiles_json;
      if (all_tiles)
        for (kernels::WgmmaTiles t : kernels::kAllWgmmaTiles) {
          const double us = wgmma_us(t);
          tiles_json += std::string(tiles_json.empty() ? "" : ", ") + "\"" +
                        kernels::wgmma_tiles_name(t) + "\": " + std::to_string(us);
          if (us < best_us) best_us = us, best = kernels::wgmma_tiles_name(t);
        }
      bench::grow_zeroed(ws_old, kernels::batch_matmul_mma_workspace_bytes(m, s.n, s.k));
      const double old_us = time_us(stream, [&](int i) {
        kernels::MatmulArgs args = args_for(i);
        args.workspace = ws_old.get(), args.workspace_bytes = ws_old.bytes();
        kernels::batch_matmul_mma(Half::BF16, e, args, stream);
      });
      const double cublas_us = time_us(stream, [&](int i) {
        cublas.run(weight(i), a.get(), out.get(), m, s.n * mats, s.k, kernels::Gemm::Out::Half,
                   stream);
      });
      // The first configuration again: the spread between equal runs (clocks, power).
      const double again_us = wgmma_us(kernels::WgmmaTiles::Auto);
      HEARTH_CUDA_CHECK(cudaStreamSynchronize(stream));
      auto tf = [&](double us) { return flops / us / 1e6; };
      std::printf(
          "| %s | %dx%d | %d | %.1f | %.1f%% | %.1f | %.1f | %.2f | %.1f | %.1f | %s %.1f |\n",
          s.name, s.n * mats, s.k, m, tf(auto_us), 100 * tf(auto_us) / peak, tf(cublas_us),
          tf(old_us), cublas_us / auto_us, auto_us, tf(again_us), best, tf(best_us));
      std::fflush(stdout);
      if (json.is_open())
        json << "{\"shape\": \"" << s.name << "\", \"n\": " << s.n * mats << ", \"k\": " << s.k
             << ", \"m\": " << m << ", \"wgmma_us\": " << auto_us << ", \"again_us\": " << again_us
             << ", \"cublaslt_us\": " << cublas_us << ", \"mma_sync_us\": " << old_us
             << ", \"tilings_us\": {" << tiles_json << "}}\n";
    }
  }
  qkv_table(ms, arena, a, out, stream);
  for (int tp : shard_tps) {
    if (tp < 1 || 1024 % tp != 0) {
      std::fprintf(stderr, "--qkv-tp %d: not a divisor of 1,024\n", tp);
      return 1;
    }
    qkv_shard_table(tp, ms, arena, a, out, stream);
  }
  HEARTH_CUDA_CHECK(cudaStreamDestroy(stream));
  return 0;
}
