// q, k and v as one fp8 launch (Fp8MatmulArgs::more): by memcmp against three separate fp8
// launches (each checked against the CPU reference in fp8_kernels_test) for every row bucket
// from 1 to 2,048, every tiling, fp32 and 16-bit outputs, with and without biases, each weight
// with its own scales, on widths that tile evenly and widths that leave partial tiles.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/batch_ops.h"
#include "kernels/fp8_matmul.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/kernels/matmul_tiling_sweep.h"
#include "weight-server/model/fp8.h"

namespace hearth {
namespace {

using kernels::Fp8Tiles;
using kernels::Half;
using kernels::MatmulEpilogue;

// rows x k values quantized per row by the rule of weight-server/model/fp8.h, on the device.
struct DeviceCodes {
  DeviceBuffer codes, scales;
};
DeviceCodes quantized(int rows, int k, float scale) {
  const std::vector<float> v = test::random_floats(size_t(rows) * k, scale);
  std::vector<uint8_t> codes(v.size());
  std::vector<float> scales(rows);
  for (int r = 0; r < rows; ++r) {
    float amax = 0.0f;
    for (int i = 0; i < k; ++i) amax = std::max(amax, std::fabs(v[size_t(r) * k + i]));
    scales[r] = fp8_e4m3_row_scale(amax);
    for (int i = 0; i < k; ++i)
      codes[size_t(r) * k + i] = fp8_e4m3_quantize(v[size_t(r) * k + i], scales[r]);
  }
  return {test::upload(codes), test::upload(scales)};
}

struct Shape {
  std::array<int, 3> n;  // q, k, v rows
  int k;
};

TEST(Fp8MatmulSegments, BitIdenticalToSeparateCallsForEveryBucketAndTiling) {
  HEARTH_REQUIRE_FP8();
  const Shape shapes[] = {{{512, 128, 128}, 1024}, {{264, 72, 136}, 640}};
  const int ms[] = {1,   2,   3,   5,   8,   13,  16,  17,  31,  32,  33,   63,   64,   65,  100,
                    127, 128, 129, 200, 255, 256, 257, 383, 512, 700, 1000, 1024, 1500, 2048};
  const int pool = 2048;
  const std::vector<Fp8Tiles> tilings = test::every_tiling_and_auto(kernels::kAllFp8Tiles);
  for (const Shape& s : shapes) {
    const DeviceCodes a = quantized(pool, s.k, 1.0f);
    std::array<DeviceCodes, 3> w;
    std::array<DeviceBuffer, 3> bias;
    for (int i = 0; i < 3; ++i) {
      w[i] = quantized(s.n[i], s.k, 0.05f);
      bias[i] = test::upload(test::random_floats(s.n[i]));
    }
    struct Output {
      MatmulEpilogue e;
      Half t;
      size_t elem;
    };
    for (const Output o : {Output{MatmulEpilogue::StoreF32, Half::BF16, 4},
                           Output{MatmulEpilogue::StoreHalf, Half::BF16, 2},
                           Output{MatmulEpilogue::StoreHalf, Half::F16, 2}})
      for (bool with_bias : {false, true}) {
        auto compute = [&](int m, Fp8Tiles tiles, bool fused) {
          std::array<DeviceBuffer, 3> out;
          for (int i = 0; i < 3; ++i) out[i] = test::poisoned(size_t(m) * s.n[i] * o.elem);
          auto segment = [&](int i) {
            return kernels::Fp8MatmulSegment{
                static_cast<const uint8_t*>(w[i].codes.get()), w[i].scales.get<float>(),
                with_bias ? bias[i].get<float>() : nullptr, out[i].get(), s.n[i]};
          };
          kernels::Fp8MatmulArgs args;
          args.a = static_cast<const uint8_t*>(a.codes.get()), args.a_scale = a.scales.get<float>();
          args.m = m, args.k = s.k;
          for (int i = 0; i < 3; ++i) {
            if (fused && i > 0) {
              args.more[i - 1] = segment(i);
              continue;
            }
            const kernels::Fp8MatmulSegment g = segment(i);
            args.w = g.w, args.w_scale = g.w_scale, args.bias = g.bias, args.out = g.out;
            args.n = g.n;
            if (!fused) kernels::fp8_matmul(o.t, o.e, args, tiles, nullptr);
          }
          if (fused) kernels::fp8_matmul(o.t, o.e, args, tiles, nullptr);
          HEARTH_CUDA_CHECK(cudaGetLastError());
          HEARTH_CUDA_CHECK(cudaDeviceSynchronize());
          std::array<std::vector<unsigned char>, 3> host;
          for (int i = 0; i < 3; ++i) {
            host[i].resize(size_t(m) * s.n[i] * o.elem);
            HEARTH_CUDA_CHECK(
                cudaMemcpy(host[i].data(), out[i].get(), host[i].size(), cudaMemcpyDeviceToHost));
          }
          return host;
        };
        for (int m : ms) {
          SCOPED_TRACE(std::string(o.elem == 4 ? "fp32" : test::name(o.t)) + " out, n " +
                       std::to_string(s.n[0]) + "+" + std::to_string(s.n[1]) + "+" +
                       std::to_string(s.n[2]) + " k " + std::to_string(s.k) +
                       (with_bias ? " bias" : "") + " m " + std::to_string(m));
          // Every tiling gives a separate launch the same bits (fp8_kernels_test): one reference.
          const auto separate = compute(m, Fp8Tiles::Auto, false);
          for (Fp8Tiles tiles : tilings) {
            const auto fused = compute(m, tiles, true);
            for (int i = 0; i < 3; ++i)
              EXPECT_EQ(0, std::memcmp(fused[i].data(), separate[i].data(), fused[i].size()))
                  << "segment " << i << " tiling " << kernels::fp8_tiles_name(tiles);
          }
        }
      }
  }
}

TEST(Fp8MatmulSegments, RejectsSegmentsWithSwiGLUOrWithoutScales) {
  HEARTH_REQUIRE_FP8();
  DeviceBuffer buf(1 << 16);
  const auto* codes = static_cast<const uint8_t*>(buf.get());
  kernels::Fp8MatmulArgs args;
  args.a = codes, args.a_scale = buf.get<float>(), args.w = codes, args.w_scale = buf.get<float>();
  args.w_up = codes, args.w_up_scale = buf.get<float>(), args.out = buf.get();
  args.m = 4, args.n = 8, args.k = 128;
  args.more[0] = {codes, buf.get<float>(), nullptr, buf.get(), 8};
  EXPECT_THROW(
      kernels::fp8_matmul(Half::BF16, MatmulEpilogue::SwiGLU, args, Fp8Tiles::Auto, nullptr),
      std::invalid_argument);
  args.more[0].w_scale = nullptr;
  EXPECT_THROW(
      kernels::fp8_matmul(Half::BF16, MatmulEpilogue::StoreF32, args, Fp8Tiles::Auto, nullptr),
      std::invalid_argument);
}

}  // namespace
}  // namespace hearth
