// The CPU engine's fp8 projections (issue 25) against a direct evaluation of the W8A8 formula in
// double precision on fresh random inputs: each token row quantized with its own scale, code
// products summed, the sum scaled by (s_x * s_w[n]), plus bias. Also: a row's result does not
// depend on the batch, and bind_weights gives an fp8 checkpoint's projections their scales.
#include "worker/engine/cpu_matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <vector>

#include "tests/support/temp_dir.h"
#include "tools/synth_model.h"
#include "weight-server/model/fp8.h"
#include "weight-server/model/fp8_quantize.h"
#include "weight-server/model/host_store.h"

namespace hearth {
namespace {

struct Fp8Matrix {
  std::vector<uint8_t> codes;
  std::vector<uint16_t> scales16;  // when the scale is 16-bit
  std::vector<float> scales32;
  WeightRef ref;
};

// A random [rows, cols] bf16 matrix quantized per row, its scales stored as `scale_dtype`, or
// (per_tensor) one scale for the whole matrix.
Fp8Matrix random_fp8(std::mt19937& rng, int64_t rows, int64_t cols, DType scale_dtype,
                     bool per_tensor) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Fp8Matrix m;
  m.codes.resize(rows * cols);
  std::vector<float> values(rows * cols);
  for (float& v : values) v = bf16_to_f32(f32_to_bf16(normal(rng) * 0.05f));
  if (per_tensor) {
    float abs_max = 0.0f;
    for (float v : values) abs_max = std::fmax(abs_max, std::fabs(v));
    const float s = fp8_e4m3_row_scale(abs_max);
    for (size_t i = 0; i < values.size(); ++i) m.codes[i] = fp8_e4m3_quantize(values[i], s);
    m.scales32 = {s};
  } else {
    for (int64_t r = 0; r < rows; ++r)
      m.scales32.push_back(
          quantize_row_fp8(&values[r * cols], DType::F32, cols, &m.codes[r * cols]));
  }
  m.ref.data = m.codes.data();
  m.ref.dtype = DType::F8_E4M3;
  m.ref.rows = rows;
  m.ref.cols = cols;
  m.ref.scale_dtype = scale_dtype;
  m.ref.scale_count = int64_t(m.scales32.size());
  if (scale_dtype == DType::F32) {
    m.ref.scale = m.scales32.data();
  } else {
    for (float s : m.scales32)
      m.scales16.push_back(scale_dtype == DType::BF16 ? f32_to_bf16(s) : f32_to_f16(s));
    m.ref.scale = m.scales16.data();
  }
  return m;
}

TEST(CpuMatmulFp8, MatchesTheW8A8FormulaInDoublePrecision) {
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> normal(0.0f, 1.0f);
  struct Shape {
    int64_t rows, cols;
    int tokens;
    DType scale_dtype;
    bool per_tensor, bias;
  };
  for (const Shape& s :
       {Shape{37, 64, 1, DType::F32, false, false}, Shape{64, 200, 5, DType::F32, false, true},
        Shape{48, 129, 3, DType::BF16, false, false}, Shape{16, 96, 4, DType::F16, true, true},
        Shape{8, 1000, 2, DType::F32, true, false}}) {
    const Fp8Matrix w = random_fp8(rng, s.rows, s.cols, s.scale_dtype, s.per_tensor);
    std::vector<float> x(s.tokens * s.cols), bias(s.rows);
    for (float& v : x) v = normal(rng) * 3.0f;
    x[0] = 0.0f;
    if (s.tokens > 1)  // an all-zero token row: scale 1, all products zero
      std::fill(x.begin() + s.cols, x.begin() + 2 * s.cols, 0.0f);
    for (float& b : bias) b = normal(rng);
    WeightRef b_ref{bias.data(), DType::F32, 1, s.rows, "bias"};
    std::vector<float> out(s.tokens * s.rows);
    cpu::matmul(out.data(), x.data(), s.tokens, w.ref, s.bias ? b_ref : WeightRef{});

    for (int t = 0; t < s.tokens; ++t) {
      const float* xt = &x[t * s.cols];
      float abs_max = 0.0f;
      for (int64_t k = 0; k < s.cols; ++k) abs_max = std::fmax(abs_max, std::fabs(xt[k]));
      const double sx = fp8_e4m3_row_scale(abs_max);
      for (int64_t n = 0; n < s.rows; ++n) {
        const double sw = w.ref.row_scale(n);
        double acc = 0, magnitude = 0;
        for (int64_t k = 0; k < s.cols; ++k) {
          const double p = double(fp8_e4m3_to_f32(fp8_e4m3_quantize(xt[k], float(sx)))) *
                           double(fp8_e4m3_to_f32(w.codes[n * s.cols + k]));
          acc += p;
          magnitude += std::fabs(p);
        }
        const double want = acc * (sx * sw) + (s.bias ? bias[n] : 0.0);
        // fp32 summation of exact products: at most (k + 3) roundings of the running sum.
        const double bound = double(s.cols + 3) * 0x1p-24 * magnitude * sx * sw +
                             (s.bias ? 0x1p-23 * std::fabs(want) : 0.0) + 1e-30;
        EXPECT_NEAR(out[t * s.rows + n], want, bound)
            << "shape " << s.rows << "x" << s.cols << " token " << t << " row " << n;
      }
    }
    // A row alone gives the same bits as in the batch.
    for (int t = 0; t < s.tokens; ++t) {
      std::vector<float> alone(s.rows);
      cpu::matmul(alone.data(), &x[t * s.cols], 1, w.ref, s.bias ? b_ref : WeightRef{});
      for (int64_t n = 0; n < s.rows; ++n) EXPECT_EQ(alone[n], out[t * s.rows + n]);
    }
  }
}

TEST(CpuMatmulFp8, BindWeightsGivesProjectionsTheirScales) {
  const std::filesystem::path dir = test::process_scratch_dir() / "cpu_matmul_fp8";
  std::filesystem::remove_all(dir);
  SynthOptions opt;
  opt.fp8 = true;
  write_synthetic_model(dir, opt);
  const HostStore store(std::make_shared<HfModel>(HfModel::open(dir)));
  const ModelWeights w = bind_weights(store);
  for (const LayerWeights& L : w.layers)
    for (const WeightRef* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) {
      EXPECT_EQ(m->dtype, DType::F8_E4M3) << m->name;
      EXPECT_EQ(m->scale_dtype, DType::F32) << m->name;
      EXPECT_EQ(m->scale_count, m->rows) << m->name;
      EXPECT_EQ(m->scale, store.at(std::string(m->name) + "_scale").data) << m->name;
    }
  EXPECT_EQ(w.embed.dtype, DType::BF16);
  EXPECT_EQ(w.embed.scale, nullptr);
  EXPECT_EQ(w.lm_head.dtype, DType::BF16);
}

}  // namespace
}  // namespace hearth
