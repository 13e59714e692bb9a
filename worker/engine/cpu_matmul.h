// The CPU engine's projections: fp32 dot products in a fixed order over weights read in place
// (bf16, f16, f32), and fp8 weights by the W8A8 formula of the FP8-dynamic scheme, which the
// GPU's fp8 kernels compute too: each token row quantized to e4m3 with its own scale, codes
// multiplied exactly, summed in fp32, the sum scaled by (token scale x row scale).
#pragma once

#include <cstdint>

#include "worker/engine/model_weights.h"

namespace hearth::cpu {

// Sixteen independent partial sums in a fixed order: the compiler vectorises this without
// reassociating, so the result does not depend on the instruction set. Inline: attention calls
// it per head and position.
inline float dot(const float* a, const float* b, int64_t n) {
  constexpr int kLanes = 16;
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) acc[j] += a[i + j] * b[i + j];
  float tail = 0.0f;
  for (; i < n; ++i) tail += a[i] * b[i];
  for (int width = kLanes / 2; width > 0; width /= 2)
    for (int j = 0; j < width; ++j) acc[j] += acc[j + width];
  return acc[0] + tail;
}

// Row `row` of `w` as fp32 values (an fp8 row dequantized: code x its scale).
void load_row(const WeightRef& w, int64_t row, float* out);

// A token row quantized as an fp8 weight row is: returns its scale s_x and writes
// dec(encode(x / s_x)) for each of its n values to `decoded`.
float quantize_activation_row(const float* x, int64_t n, float* decoded);

// out[t, r] = sum_c W[r, c] * in[t, c] (+ bias[r]) for n rows of input; for an fp8 W,
// out[t, r] = (sum_c dec(q_x[t, c]) * dec(q_w[r, c])) * (s_x[t] * s_w[r]) (+ bias[r]). Every
// row is computed alone, so a row's result does not depend on the rest of the batch.
void matmul(float* out, const float* in, int n, const WeightRef& W, const WeightRef& bias = {});

}  // namespace hearth::cpu
