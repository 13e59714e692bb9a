// The wgmma matmul (kernels/wgmma_matmul.h) against a double-precision reference on fresh random
// inputs for every epilogue and tiling, and by memcmp: every tiling (so every wgmma N width and
// 64- or 128-row block) gives the same bits, a row's result does not depend on how many rows
// are in the batch nor on its place among them.
#include "kernels/wgmma_matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <array>
#include <cstring>
#include <stdexcept>
#include <utility>
#include <vector>

#include "kernels/batch_ops.h"
#include "kernels/stream_matmul.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/kernels/matmul_tiling_sweep.h"

namespace hearth {
namespace {

using kernels::Half;
using kernels::MatmulEpilogue;
using kernels::WgmmaTiles;

double silu(double g) {
  return g / (1.0 + std::exp(-g));
}

struct Case {
  int m, n, k;
};

void run(Half t, MatmulEpilogue e, WgmmaTiles tiles, const void* a, int64_t lda, const void* w,
         const void* w_up, const float* bias, int m, int n, int k, void* out,
         int a_rows_readable = 0) {
  kernels::MatmulArgs args;
  args.a = a, args.lda = lda, args.w = w, args.w_up = w_up, args.bias = bias;
  args.m = m, args.n = n, args.k = k, args.out = out, args.a_rows_readable = a_rows_readable;
  kernels::wgmma_matmul(t, e, args, tiles, nullptr);
  HEARTH_CUDA_CHECK(cudaGetLastError());
}

TEST(WgmmaMatmul, MatchesReferenceForEveryEpilogueAndTiling) {
  HEARTH_REQUIRE_WGMMA();
  // Odd sizes: partial row and column tiles, K not a multiple of the 64-wide stage; K in whole
  // four-box stages (512) so the DeepK256 tiles run as themselves (200 columns: partial last
  // tiles of 16, 24, 32 and 48), and at 5 rows so the streaming tile does too.
  const Case cases[] = {
      {1, 96, 64}, {37, 200, 320}, {130, 264, 1040}, {9, 200, 512}, {5, 200, 512}};
  const std::vector<WgmmaTiles> tilings = test::every_tiling_and_auto(kernels::kAllWgmmaTiles);
  for (Half t : {Half::BF16, Half::F16})
    for (const Case& c : cases) {
      const auto a = test::rounded(test::random_floats(size_t(c.m) * c.k), t);
      const auto w = test::rounded(test::random_floats(size_t(c.n) * c.k, 0.05f), t);
      const auto wu = test::rounded(test::random_floats(size_t(c.n) * c.k, 0.05f), t);
      const auto bias = test::random_floats(c.n);
      const auto resid = test::random_floats(size_t(c.m) * c.n);
      // Reference in double.
      std::vector<double> dot(size_t(c.m) * c.n), dot_up(dot.size());
      for (int i = 0; i < c.m; ++i)
        for (int j = 0; j < c.n; ++j) {
          double s = 0, su = 0;
          for (int q = 0; q < c.k; ++q) {
            s += double(a[size_t(i) * c.k + q]) * w[size_t(j) * c.k + q];
            su += double(a[size_t(i) * c.k + q]) * wu[size_t(j) * c.k + q];
          }
          dot[size_t(i) * c.n + j] = s;
          dot_up[size_t(i) * c.n + j] = su;
        }
      auto da = test::upload_half(a, t), dw = test::upload_half(w, t),
           dwu = test::upload_half(wu, t);
      auto dbias = test::upload(bias);
      const size_t outs = size_t(c.m) * c.n;
      for (WgmmaTiles tiles : tilings) {
        SCOPED_TRACE(std::string(test::name(t)) + " m " + std::to_string(c.m) + " n " +
                     std::to_string(c.n) + " k " + std::to_string(c.k) + " tiles " +
                     kernels::wgmma_tiles_name(tiles));
        {  // fp32 out with bias
          auto out = test::poisoned(outs * 4);
          run(t, MatmulEpilogue::StoreF32, tiles, da.get(), 0, dw.get(), nullptr,
              static_cast<const float*>(dbias.get()), c.m, c.n, c.k, out.get());
          std::vector<float> ref(outs);
          for (size_t i = 0; i < outs; ++i) ref[i] = float(dot[i] + bias[i % c.n]);
          EXPECT_LT(test::relative_error(test::download_f32(out, outs), ref), 1e-5);
        }
        {  // accumulate into a residual
          auto out = test::upload(resid);
          run(t, MatmulEpilogue::AccumulateF32, tiles, da.get(), 0, dw.get(), nullptr, nullptr, c.m,
              c.n, c.k, out.get());
          std::vector<float> ref(outs);
          for (size_t i = 0; i < outs; ++i) ref[i] = float(dot[i] + resid[i]);
          EXPECT_LT(test::relative_error(test::download_f32(out, outs), ref), 1e-5);
        }
        {  // 16-bit out
          auto out = test::poisoned(outs * 2);
          run(t, MatmulEpilogue::StoreHalf, tiles, da.get(), 0, dw.get(), nullptr, nullptr, c.m,
              c.n, c.k, out.get());
          std::vector<float> ref(dot.begin(), dot.end());
          EXPECT_LT(test::relative_error(test::download_half(out, outs, t), ref),
                    test::half_tolerance(t));
        }
        {  // SwiGLU
          auto out = test::poisoned(outs * 2);
          run(t, MatmulEpilogue::SwiGLU, tiles, da.get(), 0, dw.get(), dwu.get(), nullptr, c.m, c.n,
              c.k, out.get());
          std::vector<float> ref(outs);
          for (size_t i = 0; i < outs; ++i) ref[i] = float(silu(dot[i]) * dot_up[i]);
          EXPECT_LT(test::relative_error(test::download_half(out, outs, t), ref),
                    test::half_tolerance(t));
        }
      }
    }
}

// Every tiling, every batch size, every place in the batch: the same bits for a row.
TEST(WgmmaMatmul, RowsAreBitIdenticalWhateverTheTilingAndBatch) {
  HEARTH_REQUIRE_WGMMA();
  // n: partial tiles; k 1088: not in whole four-box stages (DeepK256 tiles fall back), 1024: in
  // them (they run as themselves).
  const int pool = 2048 + 64, n = 520;
  for (int k : {1088, 1024})
    for (Half t : {Half::BF16, Half::F16})
      for (bool swiglu : {false, true}) {
        SCOPED_TRACE(std::string(test::name(t)) + (swiglu ? " SwiGLU" : " fp32 out") + " k " +
                     std::to_string(k));
        const auto a = test::random_floats(size_t(pool) * k);
        auto da = test::upload_half(a, t);
        auto dw = test::upload_half(test::random_floats(size_t(n) * k, 0.05f), t);
        auto dwu = test::upload_half(test::random_floats(size_t(n) * k, 0.05f), t);
        const MatmulEpilogue e = swiglu ? MatmulEpilogue::SwiGLU : MatmulEpilogue::StoreF32;
        const size_t elem = swiglu ? 2 : 4, row_bytes = n * elem;
        // Batches at odd first rows may read the pool's rows after theirs (a_map_rows): the
        // same bits as batches that may not.
        auto compute = [&](WgmmaTiles tiles, int first_row, int m) {
          auto out = test::poisoned(size_t(m) * row_bytes);
          run(t, e, tiles, static_cast<const char*>(da.get()) + size_t(first_row) * k * 2, 0,
              dw.get(), swiglu ? dwu.get() : nullptr, nullptr, m, n, k, out.get(),
              first_row % 2 ? pool - first_row : 0);
          std::vector<unsigned char> host(size_t(m) * row_bytes);
          HEARTH_CUDA_CHECK(cudaDeviceSynchronize());
          HEARTH_CUDA_CHECK(
              cudaMemcpy(host.data(), out.get(), host.size(), cudaMemcpyDeviceToHost));
          return host;
        };
        test::expect_rows_alike_whatever_the_tiling_and_batch(kernels::kAllWgmmaTiles,
                                                              WgmmaTiles::M128N256, pool, row_bytes,
                                                              compute, kernels::wgmma_tiles_name);
      }
}

// Rows past m that the kernel may read (a_rows_readable) hold NaN: rows below m keep the bits
// of a call that reads none, and no output row past m is written.
TEST(WgmmaMatmul, RowsReadPastMReachNoOutput) {
  HEARTH_REQUIRE_WGMMA();
  const int n = 200, k = 512, readable = 256;
  for (int m : {1, 17, 33, 65, 130})
    for (WgmmaTiles tiles : test::every_tiling_and_auto(kernels::kAllWgmmaTiles)) {
      SCOPED_TRACE("m " + std::to_string(m) + " tiles " + kernels::wgmma_tiles_name(tiles));
      auto a = test::poisoned(size_t(readable) * k * 2);  // 0xFFFF: NaN
      const auto rows = test::random_floats(size_t(m) * k);
      auto da = test::upload_half(rows, Half::BF16);
      HEARTH_CUDA_CHECK(cudaMemcpy(a.get(), da.get(), da.bytes(), cudaMemcpyDeviceToDevice));
      auto dw = test::upload_half(test::random_floats(size_t(n) * k, 0.05f), Half::BF16);
      const size_t row_bytes = size_t(n) * 4;
      auto alone = test::poisoned(size_t(m) * row_bytes);
      auto past = test::poisoned(size_t(readable) * row_bytes);
      HEARTH_CUDA_CHECK(cudaMemset(past.get(), 0x5A, past.bytes()));
      run(Half::BF16, MatmulEpilogue::StoreF32, tiles, da.get(), 0, dw.get(), nullptr, nullptr, m,
          n, k, alone.get());
      run(Half::BF16, MatmulEpilogue::StoreF32, tiles, a.get(), 0, dw.get(), nullptr, nullptr, m, n,
          k, past.get(), readable);
      const auto want = test::download<unsigned char>(alone, size_t(m) * row_bytes);
      const auto got = test::download<unsigned char>(past, size_t(readable) * row_bytes);
      EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size()));
      const std::vector<unsigned char> untouched(got.size() - want.size(), 0x5A);
      EXPECT_EQ(0, std::memcmp(got.data() + want.size(), untouched.data(), untouched.size()));
    }
}

// The streaming tile refuses, before touching a device, a launch it cannot take (wgmma_matmul
// hands those to a wgmma tile instead).
TEST(StreamMatmul, RefusesMoreThanEightRowsOrKOutsideWholeStages) {
  kernels::MatmulArgs args;
  args.n = 16;
  std::array<kernels::MatmulSegment, 3> segs{};
  segs[0].n = 16;
  for (const auto& [m, k] : {std::pair{9, 256}, std::pair{8, 320}}) {
    args.m = m, args.k = k;
    EXPECT_THROW(kernels::stream_matmul(Half::BF16, MatmulEpilogue::StoreF32, args, k, segs, 1,
                                        false, nullptr),
                 std::invalid_argument)
        << "m " << m << " k " << k;
  }
}

TEST(WgmmaMatmul, RejectsBadArguments) {
  HEARTH_REQUIRE_WGMMA();
  DeviceBuffer buf(1 << 16);
  kernels::MatmulArgs args;
  args.a = buf.get(), args.w = buf.get(), args.out = buf.get(), args.m = 4, args.n = 8;
  args.k = 24;
  EXPECT_THROW(
      kernels::wgmma_matmul(Half::BF16, MatmulEpilogue::StoreF32, args, WgmmaTiles::Auto, nullptr),
      std::invalid_argument);
  args.k = 64;
  EXPECT_THROW(
      kernels::wgmma_matmul(Half::BF16, MatmulEpilogue::SwiGLU, args, WgmmaTiles::Auto, nullptr),
      std::invalid_argument);
  args.a_rows_readable = 3;  // fewer than m
  EXPECT_THROW(
      kernels::wgmma_matmul(Half::BF16, MatmulEpilogue::StoreF32, args, WgmmaTiles::Auto, nullptr),
      std::invalid_argument);
}

}  // namespace
}  // namespace hearth
