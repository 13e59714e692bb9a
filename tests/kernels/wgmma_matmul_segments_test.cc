// q, k and v as one wgmma launch (MatmulArgs::more): against a double-precision reference on
// fresh random inputs, and by memcmp against three separate calls for every row bucket from 1 to
// 2,048, every tiling, bf16 and f16, with and without biases (Qwen2's q/k/v bias), on segment
// widths that tile evenly and widths that leave a partial tile at each segment's end.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/batch_ops.h"
#include "kernels/wgmma_matmul.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/kernels/matmul_tiling_sweep.h"

namespace hearth {
namespace {

using kernels::Half;
using kernels::MatmulEpilogue;
using kernels::WgmmaTiles;

struct Shape {
  std::array<int, 3> n;  // q, k, v rows
  int k;
};

// Three weights (and biases) on the device, and the outputs of one call over them.
struct Qkv {
  Shape shape;
  std::array<DeviceBuffer, 3> w, bias;
  std::array<std::vector<float>, 3> host_w, host_bias;

  Qkv(const Shape& s, Half t) : shape(s) {
    for (int i = 0; i < 3; ++i) {
      host_w[i] = test::rounded(test::random_floats(size_t(s.n[i]) * s.k, 0.05f), t);
      host_bias[i] = test::random_floats(s.n[i]);
      w[i] = test::upload_half(host_w[i], t);
      bias[i] = test::upload(host_bias[i]);
    }
  }
};

using Outputs = std::array<std::vector<unsigned char>, 3>;

std::vector<unsigned char> download(const DeviceBuffer& b, size_t bytes) {
  std::vector<unsigned char> host(bytes);
  HEARTH_CUDA_CHECK(cudaDeviceSynchronize());
  HEARTH_CUDA_CHECK(cudaMemcpy(host.data(), b.get(), bytes, cudaMemcpyDeviceToHost));
  return host;
}

// fused: one launch over the three weights; else one wgmma_matmul per weight.
Outputs compute(Half t, const Qkv& qkv, const void* a, int m, bool with_bias, WgmmaTiles tiles,
                bool fused) {
  std::array<DeviceBuffer, 3> out;
  for (int i = 0; i < 3; ++i) out[i] = test::poisoned(size_t(m) * qkv.shape.n[i] * 4);
  auto bias = [&](int i) {
    return with_bias ? static_cast<const float*>(qkv.bias[i].get()) : nullptr;
  };
  kernels::MatmulArgs args;
  args.a = a, args.m = m, args.k = qkv.shape.k;
  if (fused) {
    args.w = qkv.w[0].get(), args.bias = bias(0), args.out = out[0].get(), args.n = qkv.shape.n[0];
    for (int i = 1; i < 3; ++i)
      args.more[i - 1] = {qkv.w[i].get(), bias(i), out[i].get(), qkv.shape.n[i]};
    kernels::wgmma_matmul(t, MatmulEpilogue::StoreF32, args, tiles, nullptr);
  } else {
    for (int i = 0; i < 3; ++i) {
      args.w = qkv.w[i].get(), args.bias = bias(i), args.out = out[i].get();
      args.n = qkv.shape.n[i];
      kernels::wgmma_matmul(t, MatmulEpilogue::StoreF32, args, tiles, nullptr);
    }
  }
  HEARTH_CUDA_CHECK(cudaGetLastError());
  Outputs host;
  for (int i = 0; i < 3; ++i) host[i] = download(out[i], size_t(m) * qkv.shape.n[i] * 4);
  return host;
}

std::vector<WgmmaTiles> every_tiling() {
  return test::every_tiling_and_auto(kernels::kAllWgmmaTiles);
}

TEST(WgmmaMatmulSegments, MatchesReference) {
  HEARTH_REQUIRE_WGMMA();
  const int m = 70;
  const Shape s{{264, 72, 40}, 320};  // partial tiles in every segment for most widths
  for (Half t : {Half::BF16, Half::F16}) {
    const Qkv qkv(s, t);
    const auto a = test::rounded(test::random_floats(size_t(m) * s.k), t);
    auto da = test::upload_half(a, t);
    for (WgmmaTiles tiles : every_tiling()) {
      SCOPED_TRACE(std::string(test::name(t)) + " tiles " + kernels::wgmma_tiles_name(tiles));
      const Outputs got = compute(t, qkv, da.get(), m, true, tiles, true);
      for (int i = 0; i < 3; ++i) {
        const int n = s.n[i];
        std::vector<float> ref(size_t(m) * n), out(ref.size());
        for (int r = 0; r < m; ++r)
          for (int j = 0; j < n; ++j) {
            double sum = qkv.host_bias[i][j];
            for (int q = 0; q < s.k; ++q)
              sum += double(a[size_t(r) * s.k + q]) * qkv.host_w[i][size_t(j) * s.k + q];
            ref[size_t(r) * n + j] = float(sum);
          }
        std::memcpy(out.data(), got[i].data(), out.size() * 4);
        EXPECT_LT(test::relative_error(out, ref), 1e-5) << "segment " << i;
      }
    }
  }
}

// One launch gives every output the bits of a launch of its weight alone.
TEST(WgmmaMatmulSegments, BitIdenticalToSeparateCallsForEveryBucketAndTiling) {
  HEARTH_REQUIRE_WGMMA();
  // The 8B's q/k/v proportions (4:1:1, tile widths divide every segment), and widths whose
  // last tile in each segment is partial (a tile must never reach into the next weight).
  const Shape shapes[] = {{{512, 128, 128}, 1024}, {{264, 72, 136}, 576}};
  const int ms[] = {1,   2,   3,   5,   8,   13,  16,  17,  31,  32,  33,   63,   64,   65,  100,
                    127, 128, 129, 200, 255, 256, 257, 383, 512, 700, 1000, 1024, 1500, 2048};
  const int pool = 2048;
  for (Half t : {Half::BF16, Half::F16})
    for (const Shape& s : shapes) {
      const Qkv qkv(s, t);
      auto da = test::upload_half(test::random_floats(size_t(pool) * s.k), t);
      for (bool with_bias : {false, true})
        for (int m : ms) {
          SCOPED_TRACE(std::string(test::name(t)) + " n " + std::to_string(s.n[0]) + "+" +
                       std::to_string(s.n[1]) + "+" + std::to_string(s.n[2]) + " k " +
                       std::to_string(s.k) + (with_bias ? " bias" : "") + " m " +
                       std::to_string(m));
          // Every tiling gives separate calls the same bits (wgmma_matmul_test): one reference.
          const Outputs separate = compute(t, qkv, da.get(), m, with_bias, WgmmaTiles::Auto, false);
          for (WgmmaTiles tiles : every_tiling()) {
            const Outputs fused = compute(t, qkv, da.get(), m, with_bias, tiles, true);
            for (int i = 0; i < 3; ++i) {
              ASSERT_EQ(fused[i].size(), separate[i].size());
              EXPECT_EQ(0, std::memcmp(fused[i].data(), separate[i].data(), fused[i].size()))
                  << "segment " << i << " tiling " << kernels::wgmma_tiles_name(tiles);
            }
          }
        }
    }
}

// batch_matmul takes the segments on any GPU: one launch on Hopper, one mma.sync call per
// weight elsewhere; batch_matmul_mma's segments equal its separate calls too.
TEST(WgmmaMatmulSegments, BatchMatmulSegmentsEqualSeparateCalls) {
  HEARTH_REQUIRE_GPU();
  const Shape s{{256, 64, 64}, 512};
  const int m = 40;
  for (Half t : {Half::BF16, Half::F16}) {
    SCOPED_TRACE(test::name(t));
    const Qkv qkv(s, t);
    auto da = test::upload_half(test::random_floats(size_t(m) * s.k), t);
    for (bool mma : {false, true}) {
      std::array<std::vector<unsigned char>, 3> one, three;
      size_t ws_bytes = 0;
      for (int n : s.n)
        ws_bytes = std::max(ws_bytes, kernels::batch_matmul_mma_workspace_bytes(m, n, s.k));
      DeviceBuffer ws(std::max<size_t>(ws_bytes, 16));
      HEARTH_CUDA_CHECK(cudaMemset(ws.get(), 0, ws.bytes()));
      auto call = [&](const kernels::MatmulArgs& args) {
        if (mma)
          kernels::batch_matmul_mma(t, MatmulEpilogue::StoreF32, args, nullptr);
        else
          kernels::batch_matmul(t, MatmulEpilogue::StoreF32, args, nullptr);
        HEARTH_CUDA_CHECK(cudaGetLastError());
      };
      std::array<DeviceBuffer, 3> out;
      for (int i = 0; i < 3; ++i) out[i] = test::poisoned(size_t(m) * s.n[i] * 4);
      kernels::MatmulArgs args;
      args.a = da.get(), args.m = m, args.k = s.k, args.workspace = ws.get();
      args.workspace_bytes = ws_bytes;
      args.w = qkv.w[0].get(), args.bias = static_cast<const float*>(qkv.bias[0].get());
      args.out = out[0].get(), args.n = s.n[0];
      for (int i = 1; i < 3; ++i)
        args.more[i - 1] = {qkv.w[i].get(), static_cast<const float*>(qkv.bias[i].get()),
                            out[i].get(), s.n[i]};
      call(args);
      for (int i = 0; i < 3; ++i) one[i] = download(out[i], size_t(m) * s.n[i] * 4);
      args.more = {};
      for (int i = 0; i < 3; ++i) {
        out[i] = test::poisoned(size_t(m) * s.n[i] * 4);
        args.w = qkv.w[i].get(), args.bias = static_cast<const float*>(qkv.bias[i].get());
        args.out = out[i].get(), args.n = s.n[i];
        call(args);
        three[i] = download(out[i], size_t(m) * s.n[i] * 4);
      }
      for (int i = 0; i < 3; ++i)
        EXPECT_EQ(0, std::memcmp(one[i].data(), three[i].data(), one[i].size()))
            << (mma ? "mma.sync" : "batch_matmul") << " segment " << i;
    }
  }
}

TEST(WgmmaMatmulSegments, RejectsSegmentsWithSwiGLUOrWithoutOutput) {
  HEARTH_REQUIRE_GPU();
  DeviceBuffer buf(1 << 16);
  kernels::MatmulArgs args;
  args.a = buf.get(), args.w = buf.get(), args.w_up = buf.get(), args.out = buf.get();
  args.m = 4, args.n = 8, args.k = 64;
  args.more[0] = {buf.get(), nullptr, buf.get(), 8};
  EXPECT_THROW(kernels::batch_matmul(Half::BF16, MatmulEpilogue::SwiGLU, args, nullptr),
               std::invalid_argument);
  args.more[0].out = nullptr;
  EXPECT_THROW(kernels::batch_matmul(Half::BF16, MatmulEpilogue::StoreF32, args, nullptr),
               std::invalid_argument);
}

}  // namespace
}  // namespace hearth
