// The wgmma matmul family's fixed K slices (wgmma_matmul_k_slices, kernels/k_slices.cuh): a long
// K is summed as two halves, each one ascending chain from zero, added in order. Checked here:
// the rule depends on K alone; a sliced output is bit for bit the fp32 sum of two launches over
// the halves (the cause of the invariance, not only its effect), whether one block sums both
// halves or two blocks one each; every tiling, row count and placement gives the same bits; the
// result matches a double reference for every epilogue; the workspace is required, and its counters
// come back to zero so launch after launch agrees.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/batch_ops.h"
#include "kernels/wgmma_matmul.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/kernels/matmul_tiling_sweep.h"

namespace hearth {
namespace {

using kernels::Half;
using kernels::KHalvesAt;
using kernels::MatmulEpilogue;
using kernels::WgmmaTiles;

constexpr int kSlicedK = 12288;  // the shortest K the rule slices

// A zeroed workspace for launches of up to m rows of n columns at K.
DeviceBuffer workspace_for(int m, int n, int k, bool swiglu) {
  const size_t bytes = kernels::wgmma_matmul_workspace_bytes(m, n, k, swiglu);
  DeviceBuffer ws(bytes);
  if (bytes) HEARTH_CUDA_CHECK(cudaMemset(ws.get(), 0, bytes));
  return ws;
}

struct Launch {
  const void* a = nullptr;
  int64_t lda = 0;
  const void* w = nullptr;
  const void* w_up = nullptr;
  const float* bias = nullptr;
  int m = 0, n = 0, k = 0;
  DeviceBuffer* workspace = nullptr;
};

void run(Half t, MatmulEpilogue e, WgmmaTiles tiles, const Launch& l, void* out,
         KHalvesAt at = KHalvesAt::Auto) {
  kernels::MatmulArgs args;
  args.a = l.a, args.lda = l.lda, args.w = l.w, args.w_up = l.w_up, args.bias = l.bias;
  args.m = l.m, args.n = l.n, args.k = l.k, args.out = out;
  if (l.workspace) args.workspace = l.workspace->get(), args.workspace_bytes = l.workspace->bytes();
  kernels::wgmma_matmul(t, e, args, tiles, nullptr, at);
  HEARTH_CUDA_CHECK(cudaGetLastError());
}

// Columns [first, first + count) of a rows x cols row-major 16-bit matrix, contiguous.
DeviceBuffer columns(const DeviceBuffer& m, int rows, int cols, int first, int count) {
  DeviceBuffer out(size_t(rows) * count * 2);
  HEARTH_CUDA_CHECK(cudaMemcpy2D(
      out.get(), size_t(count) * 2, static_cast<const char*>(m.get()) + size_t(first) * 2,
      size_t(cols) * 2, size_t(count) * 2, rows, cudaMemcpyDeviceToDevice));
  return out;
}

TEST(WgmmaMatmulKSlices, DependOnKAlone) {
  EXPECT_EQ(kernels::wgmma_matmul_k_slices(14336), 2);  // the 8B's down projection
  EXPECT_EQ(kernels::wgmma_matmul_k_slices(28672), 2);  // the 70B's
  EXPECT_EQ(kernels::wgmma_matmul_k_slices(kSlicedK), 2);
  EXPECT_EQ(kernels::wgmma_matmul_k_slices(4096), 1);
  EXPECT_EQ(kernels::wgmma_matmul_k_slices(8192), 1);
  EXPECT_EQ(kernels::wgmma_matmul_k_slices(kSlicedK + 256), 1);  // halves not whole 256-stages
  EXPECT_EQ(kernels::wgmma_matmul_workspace_bytes(2048, 4096, 4096, false), 0u);
  // Every tiling's partials: at least two slices of m x n fp32 sums.
  const size_t down = kernels::wgmma_matmul_workspace_bytes(2048, 4096, 14336, false);
  EXPECT_GE(down, size_t(2) * 2048 * 4096 * 4);
  EXPECT_GE(kernels::wgmma_matmul_workspace_bytes(2048, 4096, 14336, true), down + 2048 * 4096 * 8);
}

// The cause of the bits: a sliced launch's fp32 output is the fp32 sum of launches over the two
// halves of K (each unsliced), in every tiling, with the halves in one block and on two, at rows
// the streaming tile, the decode tiles and the prompt tiles take.
TEST(WgmmaMatmulKSlices, OutputIsTheSumOfTheHalvesInOrder) {
  HEARTH_REQUIRE_WGMMA();
  const int n = 200, k = kSlicedK, half = k / 2;
  for (int m : {5, 37, 300}) {
    const auto a = test::random_floats(size_t(m) * k);
    auto da = test::upload_half(a, Half::BF16);
    auto dw = test::upload_half(test::random_floats(size_t(n) * k, 0.05f), Half::BF16);
    DeviceBuffer a0 = columns(da, m, k, 0, half), a1 = columns(da, m, k, half, half);
    DeviceBuffer w0 = columns(dw, n, k, 0, half), w1 = columns(dw, n, k, half, half);
    DeviceBuffer ws = workspace_for(m, n, k, false);
    const size_t outs = size_t(m) * n;
    for (WgmmaTiles tiles : test::every_tiling_and_auto(kernels::kAllWgmmaTiles)) {
      SCOPED_TRACE("m " + std::to_string(m) + " tiles " + kernels::wgmma_tiles_name(tiles));
      auto p0 = test::poisoned(outs * 4), p1 = test::poisoned(outs * 4);
      run(Half::BF16, MatmulEpilogue::StoreF32, tiles,
          {a0.get(), 0, w0.get(), nullptr, nullptr, m, n, half}, p0.get());
      run(Half::BF16, MatmulEpilogue::StoreF32, tiles,
          {a1.get(), 0, w1.get(), nullptr, nullptr, m, n, half}, p1.get());
      const auto h0 = test::download_f32(p0, outs), h1 = test::download_f32(p1, outs);
      std::vector<float> want(outs);
      for (size_t i = 0; i < outs; ++i) want[i] = h0[i] + h1[i];
      for (KHalvesAt at : {KHalvesAt::InOneBlock, KHalvesAt::OnTwoBlocks}) {
        SCOPED_TRACE(at == KHalvesAt::InOneBlock ? "halves in one block" : "on two blocks");
        auto sliced = test::poisoned(outs * 4);
        run(Half::BF16, MatmulEpilogue::StoreF32, tiles,
            {da.get(), 0, dw.get(), nullptr, nullptr, m, n, k, &ws}, sliced.get(), at);
        const auto got = test::download_f32(sliced, outs);
        EXPECT_EQ(0, std::memcmp(want.data(), got.data(), outs * 4));
      }
    }
  }
}

TEST(WgmmaMatmulKSlices, MatchesReferenceForEveryEpilogue) {
  HEARTH_REQUIRE_WGMMA();
  const int m = 37, n = 200, k = kSlicedK;
  const WgmmaTiles tilings[] = {WgmmaTiles::Auto, WgmmaTiles::M8Stream,
                                WgmmaTiles::M16N32DeepK256RegA, WgmmaTiles::M128N256,
                                WgmmaTiles::M256N128};
  for (Half t : {Half::BF16, Half::F16}) {
    const auto a = test::rounded(test::random_floats(size_t(m) * k), t);
    const auto w = test::rounded(test::random_floats(size_t(n) * k, 0.05f), t);
    const auto wu = test::rounded(test::random_floats(size_t(n) * k, 0.05f), t);
    const auto bias = test::random_floats(n);
    const auto resid = test::random_floats(size_t(m) * n);
    std::vector<double> dot(size_t(m) * n), dot_up(dot.size());
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        double s = 0, su = 0;
        for (int q = 0; q < k; ++q) {
          s += double(a[size_t(i) * k + q]) * w[size_t(j) * k + q];
          su += double(a[size_t(i) * k + q]) * wu[size_t(j) * k + q];
        }
        dot[size_t(i) * n + j] = s, dot_up[size_t(i) * n + j] = su;
      }
    auto da = test::upload_half(a, t), dw = test::upload_half(w, t), dwu = test::upload_half(wu, t);
    auto dbias = test::upload(bias);
    DeviceBuffer ws = workspace_for(m, n, k, true);
    const float* b = static_cast<const float*>(dbias.get());
    const size_t outs = size_t(m) * n;
    for (WgmmaTiles tiles : tilings) {
      SCOPED_TRACE(std::string(test::name(t)) + " tiles " + kernels::wgmma_tiles_name(tiles));
      {
        auto out = test::poisoned(outs * 4);
        run(t, MatmulEpilogue::StoreF32, tiles, {da.get(), 0, dw.get(), nullptr, b, m, n, k, &ws},
            out.get());
        std::vector<float> ref(outs);
        for (size_t i = 0; i < outs; ++i) ref[i] = float(dot[i] + bias[i % n]);
        EXPECT_LT(test::relative_error(test::download_f32(out, outs), ref), 1e-5);
      }
      {
        auto out = test::upload(resid);
        run(t, MatmulEpilogue::AccumulateF32, tiles,
            {da.get(), 0, dw.get(), nullptr, nullptr, m, n, k, &ws}, out.get());
        std::vector<float> ref(outs);
        for (size_t i = 0; i < outs; ++i) ref[i] = float(dot[i] + resid[i]);
        EXPECT_LT(test::relative_error(test::download_f32(out, outs), ref), 1e-5);
      }
      {
        auto out = test::poisoned(outs * 2);
        run(t, MatmulEpilogue::SwiGLU, tiles,
            {da.get(), 0, dw.get(), dwu.get(), nullptr, m, n, k, &ws}, out.get());
        std::vector<float> ref(outs);
        for (size_t i = 0; i < outs; ++i)
          ref[i] = float(dot[i] / (1.0 + std::exp(-dot[i])) * dot_up[i]);
        EXPECT_LT(test::relative_error(test::download_half(out, outs, t), ref),
                  test::half_tolerance(t));
      }
    }
  }
}

// Every tiling, every batch size, every place in the batch, the halves in one block or on two:
// the same bits for a row, sliced. The launches take Auto, one block and two blocks in turn, so
// every comparison against the reference (Auto) also crosses the placements.
TEST(WgmmaMatmulKSlices, RowsAreBitIdenticalWhateverTheTilingAndBatch) {
  HEARTH_REQUIRE_WGMMA();
  const int pool = 2048 + 64, n = 264, k = kSlicedK;
  for (bool swiglu : {false, true}) {
    SCOPED_TRACE(swiglu ? "SwiGLU" : "fp32 out");
    auto da = test::upload_half(test::random_floats(size_t(pool) * k), Half::BF16);
    auto dw = test::upload_half(test::random_floats(size_t(n) * k, 0.05f), Half::BF16);
    auto dwu = test::upload_half(test::random_floats(size_t(n) * k, 0.05f), Half::BF16);
    DeviceBuffer ws = workspace_for(pool, n, k, swiglu);
    const MatmulEpilogue e = swiglu ? MatmulEpilogue::SwiGLU : MatmulEpilogue::StoreF32;
    const size_t row_bytes = size_t(n) * (swiglu ? 2 : 4);
    int launches = 0;
    auto compute = [&](WgmmaTiles tiles, int first_row, int m) {
      constexpr KHalvesAt kInTurn[] = {KHalvesAt::Auto, KHalvesAt::InOneBlock,
                                       KHalvesAt::OnTwoBlocks};
      auto out = test::poisoned(size_t(m) * row_bytes);
      run(Half::BF16, e, tiles,
          {static_cast<const char*>(da.get()) + size_t(first_row) * k * 2, 0, dw.get(),
           swiglu ? dwu.get() : nullptr, nullptr, m, n, k, &ws},
          out.get(), kInTurn[launches++ % 3]);
      return test::download<unsigned char>(out, size_t(m) * row_bytes);
    };
    test::expect_rows_alike_whatever_the_tiling_and_batch(kernels::kAllWgmmaTiles,
                                                          WgmmaTiles::M128N256, pool, row_bytes,
                                                          compute, kernels::wgmma_tiles_name);
  }
}

// Without its workspace a sliced launch is refused with a message that names it; with one, the
// counters come back to zero: the same launch again, after one of another shape, the same bits
// (a counter left behind would make no block the last, and the output would stay poisoned).
TEST(WgmmaMatmulKSlices, NeedTheirWorkspaceAndLeaveItReady) {
  HEARTH_REQUIRE_WGMMA();
  const int m = 64, n = 256, k = kSlicedK;
  auto da = test::upload_half(test::random_floats(size_t(m) * k), Half::BF16);
  auto dw = test::upload_half(test::random_floats(size_t(n) * k, 0.05f), Half::BF16);
  try {
    auto out = test::poisoned(size_t(m) * n * 4);
    run(Half::BF16, MatmulEpilogue::StoreF32, WgmmaTiles::Auto,
        {da.get(), 0, dw.get(), nullptr, nullptr, m, n, k}, out.get());
    ADD_FAILURE() << "a sliced launch without a workspace ran";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("workspace"), std::string::npos) << e.what();
  }
  DeviceBuffer ws = workspace_for(m, n, k, false);
  const Launch full{da.get(), 0, dw.get(), nullptr, nullptr, m, n, k, &ws};
  std::vector<unsigned char> first;
  for (WgmmaTiles tiles : {WgmmaTiles::Auto, WgmmaTiles::M128N64, WgmmaTiles::M8Stream8,
                           WgmmaTiles::Auto, WgmmaTiles::M64N32DeepK256RegA}) {
    SCOPED_TRACE(kernels::wgmma_tiles_name(tiles));
    auto out = test::poisoned(size_t(m) * n * 4);
    Launch l = full;
    if (tiles == WgmmaTiles::M8Stream8) l.m = 8;  // another shape in between
    run(Half::BF16, MatmulEpilogue::StoreF32, tiles, l, out.get());
    const auto got = test::download<unsigned char>(out, size_t(l.m) * n * 4);
    if (first.empty()) first = got;
    EXPECT_EQ(0, std::memcmp(first.data(), got.data(), got.size()));
  }
}

}  // namespace
}  // namespace hearth
