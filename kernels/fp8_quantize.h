// Per-row e4m3 quantization on the GPU, the rule of weight-server/model/fp8.h bit for bit: a
// row's scale is its largest magnitude / 448 in fp32 (1 for an all-zero row), each code is
// encode(value / scale) rounded to nearest even and saturated at ±448. The same kernel serves
// activations [m, k] (one scale per token, as the fp8 matmul's input) and weights [n, k] (one
// per output channel, quantize-at-load): both are rows of 16-bit values.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/ops.h"

namespace hearth::kernels {

struct Fp8QuantizeArgs {
  const void* in = nullptr;  // [rows, k] 16-bit, rows `ld` elements apart
  int64_t ld = 0;            // 0: k
  int rows = 0, k = 0;       // k: a multiple of 8
  uint8_t* codes = nullptr;  // [rows, k] e4m3, contiguous
  float* scales = nullptr;   // [rows]
};

// Requires 16-byte aligned in and codes (8-byte would do for codes), ld % 8 == 0.
void fp8_quantize_rows(Half type, const Fp8QuantizeArgs& args, cudaStream_t stream);

// rmsnorm (kernels/ops.h) of n fp32 rows of `hidden`, quantized as fp8_quantize_rows would
// quantize rmsnorm's 16-bit output, in one kernel (kernels/rmsnorm_fp8.cu): the same codes
// [n, hidden] and row scales [n], bit for bit, without the 16-bit rows.
void rmsnorm_fp8(Half type, const float* x, const float* weight, int n, int hidden, float eps,
                 uint8_t* codes, float* scales, cudaStream_t stream);

}  // namespace hearth::kernels
