// The fp8 kernels on the GPU: per-row quantization byte for byte against the rule of
// weight-server/model/fp8.h, the fp8 wgmma matmul against a CPU reference of the W8A8 formula
// for every epilogue and tiling, and by memcmp: a row's bits do not depend on the tiling, the
// batch's row count (every bucket) or the row's place in the batch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/batch_ops.h"
#include "kernels/fp8_matmul.h"
#include "kernels/fp8_quantize.h"
#include "kernels/ops.h"
#include "kernels/reference.h"
#include "tests/kernels/gpu_test_util.h"
#include "tests/kernels/matmul_tiling_sweep.h"
#include "weight-server/model/fp8.h"

namespace hearth {
namespace {

using kernels::Fp8Tiles;
using kernels::Half;
using kernels::MatmulEpilogue;

// Rows quantized by the CPU rule: codes and scales.
struct Quantized {
  std::vector<uint8_t> codes;
  std::vector<float> scales;
};
Quantized quantize_cpu(const std::vector<float>& v, int rows, int k, int64_t ld) {
  Quantized q{std::vector<uint8_t>(size_t(rows) * k), std::vector<float>(rows)};
  for (int r = 0; r < rows; ++r) {
    float amax = 0.0f;
    for (int i = 0; i < k; ++i) amax = std::max(amax, std::fabs(v[size_t(r) * ld + i]));
    q.scales[r] = fp8_e4m3_row_scale(amax);
    for (int i = 0; i < k; ++i)
      q.codes[size_t(r) * k + i] = fp8_e4m3_quantize(v[size_t(r) * ld + i], q.scales[r]);
  }
  return q;
}

using test::download;

TEST(Fp8Quantize, EqualsTheCpuRuleByteForByte) {
  HEARTH_REQUIRE_GPU();
  const int k = 1000, ld = 1032;  // k not a multiple of the block's 2048-value stride
  for (Half t : {Half::BF16, Half::F16}) {
    SCOPED_TRACE(test::name(t));
    // Row kinds: normal values; all zero; one huge value among tiny ones (quotients deep in
    // e4m3's subnormals and below them); values at ±448 scale multiples and their ties; a
    // constant row; wide dynamic range.
    std::vector<float> v(size_t(12) * ld, 0.0f);
    auto row = [&](int r) { return &v[size_t(r) * ld]; };
    const auto normal = test::random_floats(size_t(12) * ld);
    for (int r = 0; r < 12; ++r)
      for (int i = 0; i < k; ++i) row(r)[i] = normal[size_t(r) * ld + i];
    std::fill(row(1), row(1) + k, 0.0f);
    for (int i = 0; i < k; ++i) row(2)[i] *= 1e-4f;
    row(2)[7] = t == Half::BF16 ? 3e4f : 6e4f;
    for (int i = 0; i < k; ++i) row(3)[i] = float((i % 17) - 8) * 56.0f;  // -448 .. 448
    row(3)[0] = 448.0f, row(3)[1] = -448.0f;
    for (int i = 0; i < k; ++i) row(4)[i] = 0.75f;
    for (int i = 0; i < k; ++i) row(5)[i] = std::ldexp(normal[size_t(5) * ld + i], (i % 24) - 16);
    for (int i = 0; i < k; ++i) row(6)[i] = -std::fabs(row(6)[i]);
    std::fill(row(7), row(7) + k, 0.0f);
    row(7)[k - 1] = -1.0f;
    v = test::rounded(v, t);
    const int rows = 12;
    auto din = test::upload_half(v, t);
    auto codes = test::poisoned(size_t(rows) * k), scales = test::poisoned(size_t(rows) * 4);
    kernels::Fp8QuantizeArgs args;
    args.in = din.get(), args.ld = ld, args.rows = rows, args.k = k;
    args.codes = static_cast<uint8_t*>(codes.get()),
    args.scales = static_cast<float*>(scales.get());
    kernels::fp8_quantize_rows(t, args, nullptr);
    const Quantized want = quantize_cpu(v, rows, k, ld);
    const auto got_codes = download<uint8_t>(codes, size_t(rows) * k);
    const auto got_scales = download<float>(scales, rows);
    EXPECT_EQ(0, std::memcmp(want.scales.data(), got_scales.data(), rows * 4));
    for (int r = 0; r < rows; ++r)
      EXPECT_EQ(0, std::memcmp(&want.codes[size_t(r) * k], &got_codes[size_t(r) * k], k))
          << "row " << r << " scale " << want.scales[r];
    EXPECT_EQ(1.0f, got_scales[1]);  // all-zero row
    EXPECT_EQ(0x7e, got_codes[size_t(3) * k]);
    EXPECT_EQ(0xfe, got_codes[size_t(3) * k + 1]);
  }
  // Weights-sized rows in bulk.
  const int rows = 300, wk = 4096;
  const auto w = test::rounded(test::random_floats(size_t(rows) * wk, 0.02f), Half::BF16);
  auto dw = test::upload_half(w, Half::BF16);
  DeviceBuffer codes(size_t(rows) * wk), scales(rows * 4);
  kernels::Fp8QuantizeArgs args;
  args.in = dw.get(), args.rows = rows, args.k = wk;
  args.codes = static_cast<uint8_t*>(codes.get()), args.scales = static_cast<float*>(scales.get());
  kernels::fp8_quantize_rows(Half::BF16, args, nullptr);
  const Quantized want = quantize_cpu(w, rows, wk, wk);
  EXPECT_EQ(0, std::memcmp(want.codes.data(), download<uint8_t>(codes, want.codes.size()).data(),
                           want.codes.size()));
  EXPECT_EQ(0, std::memcmp(want.scales.data(), download<float>(scales, rows).data(), rows * 4));
}

// rmsnorm_fp8 == rmsnorm then fp8_quantize_rows, byte for byte (codes and scales), at widths
// of each of rmsnorm's block sizes, with an all-zero row; its codes are the CPU rule applied
// to rmsnorm's 16-bit output, and decode to the CPU reference rmsnorm within e4m3's rounding.
TEST(Fp8Quantize, RmsnormFp8EqualsRmsnormThenQuantize) {
  HEARTH_REQUIRE_GPU();
  const int n = 37;
  for (Half t : {Half::BF16, Half::F16})
    for (int hidden : {64, 200, 512, 1024, 2048, 4096, 8192}) {
      SCOPED_TRACE(std::string(test::name(t)) + " hidden " + std::to_string(hidden));
      std::vector<float> x = test::random_floats(size_t(n) * hidden, 3.0f);
      std::fill(x.begin() + size_t(5) * hidden, x.begin() + size_t(6) * hidden, 0.0f);
      std::vector<float> w = test::random_floats(size_t(hidden), 0.5f);
      for (float& v : w) v += 1.0f;
      const float eps = 1e-5f;
      auto dx = test::upload(x), dw = test::upload(w);
      DeviceBuffer xn(size_t(n) * hidden * 2);
      auto codes = test::poisoned(size_t(n) * hidden), scales = test::poisoned(size_t(n) * 4);
      kernels::rmsnorm(t, dx.get<float>(), dw.get<float>(), n, hidden, eps, xn.get(), nullptr);
      kernels::Fp8QuantizeArgs q;
      q.in = xn.get(), q.rows = n, q.k = hidden;
      q.codes = codes.get<uint8_t>(), q.scales = scales.get<float>();
      kernels::fp8_quantize_rows(t, q, nullptr);
      auto fused_codes = test::poisoned(size_t(n) * hidden),
           fused_scales = test::poisoned(size_t(n) * 4);
      kernels::rmsnorm_fp8(t, dx.get<float>(), dw.get<float>(), n, hidden, eps,
                           fused_codes.get<uint8_t>(), fused_scales.get<float>(), nullptr);
      const auto want_codes = download<uint8_t>(codes, size_t(n) * hidden);
      const auto got_codes = download<uint8_t>(fused_codes, size_t(n) * hidden);
      const auto want_scales = download<float>(scales, n);
      const auto got_scales = download<float>(fused_scales, n);
      EXPECT_EQ(0, std::memcmp(want_scales.data(), got_scales.data(), size_t(n) * 4));
      for (int r = 0; r < n; ++r)
        EXPECT_EQ(
            0, std::memcmp(&want_codes[size_t(r) * hidden], &got_codes[size_t(r) * hidden], hidden))
            << "row " << r;
      const std::vector<float> normed = test::download_half(xn, size_t(n) * hidden, t);
      const Quantized cpu = quantize_cpu(normed, n, hidden, hidden);
      EXPECT_EQ(0, std::memcmp(cpu.codes.data(), got_codes.data(), cpu.codes.size()));
      EXPECT_EQ(0, std::memcmp(cpu.scales.data(), got_scales.data(), size_t(n) * 4));
      EXPECT_EQ(got_scales[5], 1.0f);  // the all-zero row
      const std::vector<float> ref = reference::rmsnorm(x, w, n, hidden, eps);
      std::vector<float> decoded(ref.size());
      for (size_t i = 0; i < ref.size(); ++i)
        decoded[i] = fp8_e4m3_to_f32(got_codes[i]) * got_scales[i / hidden];
      EXPECT_LT(test::relative_error(decoded, ref), 0.05);  // e4m3 keeps 3 mantissa bits
    }
}

void run(Half t, MatmulEpilogue e, Fp8Tiles tiles, const kernels::Fp8MatmulArgs& args) {
  kernels::fp8_matmul(t, e, args, tiles, nullptr);
  HEARTH_CUDA_CHECK(cudaGetLastError());
}

struct Case {
  int m, n, k;
};

// The tensor core sums a stage's 128 fp8 products with fewer mantissa bits than fp32 (about 14,
// by DeepSeek-V3's measurement), which dominates the error against the exact sum; still well
// below a 16-bit output's rounding, and far below fp8's own quantization error.
constexpr double kFp32Tolerance = 1e-3;
double half_tolerance(Half t) {
  return test::half_tolerance(t) + kFp32Tolerance;
}

TEST(Fp8Matmul, MatchesReferenceForEveryEpilogueAndTiling) {
  HEARTH_REQUIRE_FP8();
  // Partial row and column tiles; K not a multiple of the 128-wide stage; a long K (promotion).
  const Case cases[] = {{1, 96, 64}, {37, 200, 320}, {130, 264, 1040}, {70, 128, 8192}};
  const std::vector<Fp8Tiles> tilings = test::every_tiling_and_auto(kernels::kAllFp8Tiles);
  double worst = 0;
  for (const Case& c : cases) {
    const auto x = test::random_floats(size_t(c.m) * c.k);
    const auto w = test::random_floats(size_t(c.n) * c.k, 0.05f);
    const auto wu = test::random_floats(size_t(c.n) * c.k, 0.05f);
    const Quantized qa = quantize_cpu(x, c.m, c.k, c.k), qw = quantize_cpu(w, c.n, c.k, c.k),
                    qu = quantize_cpu(wu, c.n, c.k, c.k);
    const auto bias = test::random_floats(c.n);
    const auto resid = test::random_floats(size_t(c.m) * c.n);
    // The contract's formula: acc exact (double) over decoded codes, then acc * (s_x * s_w).
    std::vector<double> out(size_t(c.m) * c.n), out_up(out.size());
    for (int i = 0; i < c.m; ++i)
      for (int j = 0; j < c.n; ++j) {
        double s = 0, su = 0;
        for (int q = 0; q < c.k; ++q) {
          const double a = fp8_e4m3_to_f32(qa.codes[size_t(i) * c.k + q]);
          s += a * fp8_e4m3_to_f32(qw.codes[size_t(j) * c.k + q]);
          su += a * fp8_e4m3_to_f32(qu.codes[size_t(j) * c.k + q]);
        }
        out[size_t(i) * c.n + j] = s * double(qa.scales[i] * qw.scales[j]);
        out_up[size_t(i) * c.n + j] = su * double(qa.scales[i] * qu.scales[j]);
      }
    auto da = test::upload(qa.codes), dw = test::upload(qw.codes), du = test::upload(qu.codes);
    auto dsa = test::upload(qa.scales), dsw = test::upload(qw.scales),
         dsu = test::upload(qu.scales);
    auto dbias = test::upload(bias);
    kernels::Fp8MatmulArgs args;
    args.a = static_cast<const uint8_t*>(da.get()), args.a_scale = dsa.get<float>();
    args.w = static_cast<const uint8_t*>(dw.get()), args.w_scale = dsw.get<float>();
    args.m = c.m, args.n = c.n, args.k = c.k;
    const size_t outs = size_t(c.m) * c.n;
    for (Fp8Tiles tiles : tilings) {
      SCOPED_TRACE("m " + std::to_string(c.m) + " n " + std::to_string(c.n) + " k " +
                   std::to_string(c.k) + " tiles " + kernels::fp8_tiles_name(tiles));
      {  // fp32 out with bias
        auto o = test::poisoned(outs * 4);
        kernels::Fp8MatmulArgs b = args;
        b.bias = dbias.get<float>(), b.out = o.get();
        run(Half::BF16, MatmulEpilogue::StoreF32, tiles, b);
        std::vector<float> ref(outs);
        for (size_t i = 0; i < outs; ++i) ref[i] = float(out[i] + bias[i % c.n]);
        const double err = test::relative_error(test::download_f32(o, outs), ref);
        worst = std::max(worst, err);
        EXPECT_LT(err, kFp32Tolerance);
      }
      {  // accumulate into a residual
        auto o = test::upload(resid);
        kernels::Fp8MatmulArgs b = args;
        b.out = o.get();
        run(Half::BF16, MatmulEpilogue::AccumulateF32, tiles, b);
        std::vector<float> ref(outs);
        for (size_t i = 0; i < outs; ++i) ref[i] = float(out[i] + resid[i]);
        EXPECT_LT(test::relative_error(test::download_f32(o, outs), ref), kFp32Tolerance);
      }
      for (Half t : {Half::BF16, Half::F16}) {
        SCOPED_TRACE(test::name(t));
        {  // 16-bit out
          auto o = test::poisoned(outs * 2);
          kernels::Fp8MatmulArgs b = args;
          b.out = o.get();
          run(t, MatmulEpilogue::StoreHalf, tiles, b);
          std::vector<float> ref(out.begin(), out.end());
          EXPECT_LT(test::relative_error(test::download_half(o, outs, t), ref), half_tolerance(t));
        }
        {  // SwiGLU of gate and up
          auto o = test::poisoned(outs * 2);
          kernels::Fp8MatmulArgs b = args;
          b.w_up = static_cast<const uint8_t*>(du.get()), b.w_up_scale = dsu.get<float>();
          b.out = o.get();
          run(t, MatmulEpilogue::SwiGLU, tiles, b);
          std::vector<float> ref(outs);
          for (size_t i = 0; i < outs; ++i)
            ref[i] = float(out[i] / (1.0 + std::exp(-out[i])) * out_up[i]);
          EXPECT_LT(test::relative_error(test::download_half(o, outs, t), ref), half_tolerance(t));
        }
      }
    }
  }
  std::printf("fp8 matmul: worst relative error (fp32 out) against the exact sum: %.3g\n", worst);
}

// Every tiling, every batch size, every place in the batch: the same bits for a row.
TEST(Fp8Matmul, RowsAreBitIdenticalWhateverTheTilingAndBatch) {
  HEARTH_REQUIRE_FP8();
  const int pool = 2048 + 64, n = 520, k = 1088;  // n, k: partial tiles and stage
  const Quantized qa = quantize_cpu(test::random_floats(size_t(pool) * k), pool, k, k);
  const Quantized qw = quantize_cpu(test::random_floats(size_t(n) * k, 0.05f), n, k, k);
  const Quantized qu = quantize_cpu(test::random_floats(size_t(n) * k, 0.05f), n, k, k);
  auto da = test::upload(qa.codes), dw = test::upload(qw.codes), du = test::upload(qu.codes);
  auto dsa = test::upload(qa.scales), dsw = test::upload(qw.scales), dsu = test::upload(qu.scales);
  for (bool swiglu : {false, true}) {
    SCOPED_TRACE(swiglu ? "SwiGLU" : "fp32 out");
    const MatmulEpilogue e = swiglu ? MatmulEpilogue::SwiGLU : MatmulEpilogue::StoreF32;
    const size_t elem = swiglu ? 2 : 4, row_bytes = n * elem;
    auto compute = [&](Fp8Tiles tiles, int first_row, int m) {
      auto out = test::poisoned(size_t(m) * row_bytes);
      kernels::Fp8MatmulArgs args;
      args.a = static_cast<const uint8_t*>(da.get()) + size_t(first_row) * k;
      args.a_scale = dsa.get<float>() + first_row;
      args.w = static_cast<const uint8_t*>(dw.get()), args.w_scale = dsw.get<float>();
      if (swiglu)
        args.w_up = static_cast<const uint8_t*>(du.get()), args.w_up_scale = dsu.get<float>();
      args.m = m, args.n = n, args.k = k, args.out = out.get();
      // Odd first rows may read the pool's rows after theirs (a_map_rows): the same bits.
      args.a_rows_readable = first_row % 2 ? pool - first_row : 0;
      run(Half::BF16, e, tiles, args);
      return download<unsigned char>(out, size_t(m) * row_bytes);
    };
    test::expect_rows_alike_whatever_the_tiling_and_batch(kernels::kAllFp8Tiles, Fp8Tiles::M128N128,
                                                          pool, row_bytes, compute,
                                                          kernels::fp8_tiles_name);
  }
}

// Quantize on the GPU, then multiply: the same bits as multiplying the CPU rule's codes.
TEST(Fp8Matmul, QuantizedOnTheGpuEqualsQuantizedOnTheCpu) {
  HEARTH_REQUIRE_FP8();
  const int m = 50, n = 136, k = 512;
  const auto x = test::rounded(test::random_floats(size_t(m) * k), Half::BF16);
  const Quantized qa = quantize_cpu(x, m, k, k);
  const Quantized qw = quantize_cpu(test::random_floats(size_t(n) * k, 0.05f), n, k, k);
  auto dx = test::upload_half(x, Half::BF16), dw = test::upload(qw.codes),
       dsw = test::upload(qw.scales);
  auto da_cpu = test::upload(qa.codes), dsa_cpu = test::upload(qa.scales);
  DeviceBuffer da(size_t(m) * k), dsa(size_t(m) * 4);
  kernels::Fp8QuantizeArgs q;
  q.in = dx.get(), q.rows = m, q.k = k, q.codes = static_cast<uint8_t*>(da.get());
  q.scales = dsa.get<float>();
  kernels::fp8_quantize_rows(Half::BF16, q, nullptr);
  auto multiply = [&](const DeviceBuffer& a, const DeviceBuffer& sa) {
    auto out = test::poisoned(size_t(m) * n * 2);
    kernels::Fp8MatmulArgs args;
    args.a = static_cast<const uint8_t*>(a.get()), args.a_scale = sa.get<float>();
    args.w = static_cast<const uint8_t*>(dw.get()), args.w_scale = dsw.get<float>();
    args.m = m, args.n = n, args.k = k, args.out = out.get();
    run(Half::BF16, MatmulEpilogue::StoreHalf, Fp8Tiles::Auto, args);
    return download<uint16_t>(out, size_t(m) * n);
  };
  EXPECT_EQ(multiply(da, dsa), multiply(da_cpu, dsa_cpu));
}

// Rows past m that the kernel may read (a_rows_readable) hold NaN codes: rows below m keep the
// bits of a call that reads none, and no output row past m is written.
TEST(Fp8Matmul, RowsReadPastMReachNoOutput) {
  HEARTH_REQUIRE_FP8();
  const int n = 200, k = 512, readable = 256;
  for (int m : {1, 17, 33, 65, 130})
    for (Fp8Tiles tiles : test::every_tiling_and_auto(kernels::kAllFp8Tiles)) {
      SCOPED_TRACE("m " + std::to_string(m) + " tiles " + kernels::fp8_tiles_name(tiles));
      const Quantized qa = quantize_cpu(test::random_floats(size_t(m) * k), m, k, k);
      const Quantized qw = quantize_cpu(test::random_floats(size_t(n) * k, 0.05f), n, k, k);
      auto a = test::poisoned(size_t(readable) * k);  // 0xFF: an e4m3 NaN
      HEARTH_CUDA_CHECK(
          cudaMemcpy(a.get(), qa.codes.data(), qa.codes.size(), cudaMemcpyHostToDevice));
      auto da = test::upload(qa.codes), dsa = test::upload(qa.scales);
      auto dw = test::upload(qw.codes), dsw = test::upload(qw.scales);
      const size_t row_bytes = size_t(n) * 4;
      auto multiply = [&](const DeviceBuffer& codes, int rows_readable, size_t out_rows) {
        auto out = test::poisoned(out_rows * row_bytes);
        HEARTH_CUDA_CHECK(cudaMemset(out.get(), 0x5A, out.bytes()));
        kernels::Fp8MatmulArgs args;
        args.a = static_cast<const uint8_t*>(codes.get()), args.a_scale = dsa.get<float>();
        args.w = static_cast<const uint8_t*>(dw.get()), args.w_scale = dsw.get<float>();
        args.m = m, args.n = n, args.k = k, args.out = out.get();
        args.a_rows_readable = rows_readable;
        run(Half::BF16, MatmulEpilogue::StoreF32, tiles, args);
        return download<unsigned char>(out, out_rows * row_bytes);
      };
      const auto want = multiply(da, 0, m);
      const auto got = multiply(a, readable, readable);
      EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size()));
      const std::vector<unsigned char> untouched(got.size() - want.size(), 0x5A);
      EXPECT_EQ(0, std::memcmp(got.data() + want.size(), untouched.data(), untouched.size()));
    }
}

TEST(Fp8Matmul, RejectsBadArgumentsAndSaysWhereItRuns) {
  HEARTH_REQUIRE_GPU();
  if (!kernels::fp8_matmul_available()) {
    // Off Hopper: refused by name, never a silent fallback.
    try {
      kernels::require_fp8_matmul();
      ADD_FAILURE() << "require_fp8_matmul did not throw off Hopper";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("fp8"), std::string::npos) << e.what();
    }
    return;
  }
  EXPECT_NO_THROW(kernels::require_fp8_matmul());
  DeviceBuffer buf(1 << 16);
  kernels::Fp8MatmulArgs args;
  args.a = static_cast<const uint8_t*>(buf.get()), args.w = args.a;
  args.a_scale = buf.get<float>(), args.w_scale = buf.get<float>();
  args.out = buf.get(), args.m = 4, args.n = 8, args.k = 24;
  EXPECT_THROW(
      kernels::fp8_matmul(Half::BF16, MatmulEpilogue::StoreF32, args, Fp8Tiles::Auto, nullptr),
      std::invalid_argument);
  args.k = 64;
  EXPECT_THROW(
      kernels::fp8_matmul(Half::BF16, MatmulEpilogue::SwiGLU, args, Fp8Tiles::Auto, nullptr),
      std::invalid_argument);
  args.k = 64, args.a_rows_readable = 3;  // fewer than m
  EXPECT_THROW(
      kernels::fp8_matmul(Half::BF16, MatmulEpilogue::StoreF32, args, Fp8Tiles::Auto, nullptr),
      std::invalid_argument);
  args.a_rows_readable = 0, args.a_scale = nullptr;
  EXPECT_THROW(
      kernels::fp8_matmul(Half::BF16, MatmulEpilogue::StoreF32, args, Fp8Tiles::Auto, nullptr),
      std::invalid_argument);
}

}  // namespace
}  // namespace hearth
