#include "worker/engine/cpu_matmul.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "weight-server/model/fp8.h"

namespace hearth::cpu {

void load_row(const WeightRef& w, int64_t row, float* out) {
  const int64_t n = w.cols;
  switch (w.dtype) {
    case DType::F32:
      std::copy_n(static_cast<const float*>(w.data) + row * n, n, out);
      return;
    case DType::BF16: {
      const uint16_t* p = static_cast<const uint16_t*>(w.data) + row * n;
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(p[i]);
      return;
    }
    case DType::F16: {
      const uint16_t* p = static_cast<const uint16_t*>(w.data) + row * n;
      for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(p[i]);
      return;
    }
    case DType::F8_E4M3: {
      const uint8_t* p = static_cast<const uint8_t*>(w.data) + row * n;
      const float scale = w.row_scale(row);
      for (int64_t i = 0; i < n; ++i) out[i] = fp8_e4m3_to_f32(p[i]) * scale;
      return;
    }
  }
}

float quantize_activation_row(const float* x, int64_t n, float* decoded) {
  float abs_max = 0.0f;
  for (int64_t i = 0; i < n; ++i) abs_max = std::fmax(abs_max, std::fabs(x[i]));
  const float scale = fp8_e4m3_row_scale(abs_max);
  for (int64_t i = 0; i < n; ++i) decoded[i] = fp8_e4m3_to_f32(fp8_e4m3_quantize(x[i], scale));
  return scale;
}

namespace {

// W8A8: the token rows are quantized once, each weight row's codes decoded once (unscaled:
// the scales multiply the sum, as on the GPU).
void matmul_fp8(float* out, const float* in, int n, const WeightRef& W, const float* b) {
  const int64_t k = W.cols;
  std::vector<float> xq(size_t(n) * k), sx(n);
  for (int t = 0; t < n; ++t) sx[t] = quantize_activation_row(in + t * k, k, &xq[t * k]);
  std::vector<float> row(k);
  for (int64_t r = 0; r < W.rows; ++r) {
    const uint8_t* codes = static_cast<const uint8_t*>(W.data) + r * k;
    for (int64_t i = 0; i < k; ++i) row[i] = fp8_e4m3_to_f32(codes[i]);
    const float sw = W.row_scale(r);
    for (int t = 0; t < n; ++t) {
      const float v = dot(row.data(), &xq[t * k], k) * (sx[t] * sw);
      out[int64_t(t) * W.rows + r] = b ? v + b[r] : v;
    }
  }
}

}  // namespace

// Each weight row is converted once and used for every token, so prefill reads the weights
// once.
void matmul(float* out, const float* in, int n, const WeightRef& W, const WeightRef& bias) {
  std::vector<float> b;
  if (bias) {
    b.resize(bias.cols);
    load_row(bias, 0, b.data());
  }
  if (W.dtype == DType::F8_E4M3) return matmul_fp8(out, in, n, W, bias ? b.data() : nullptr);
  std::vector<float> row(W.cols);
  for (int64_t r = 0; r < W.rows; ++r) {
    load_row(W, r, row.data());
    for (int t = 0; t < n; ++t) {
      float v = dot(row.data(), in + int64_t(t) * W.cols, W.cols);
      out[int64_t(t) * W.rows + r] = bias ? v + b[r] : v;
    }
  }
}

}  // namespace hearth::cpu
