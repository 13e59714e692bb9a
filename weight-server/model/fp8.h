// fp8 e4m3 ("e4m3fn" in the OCP 8-bit float spec, torch.float8_e4m3fn, safetensors F8_E4M3):
// 1 sign bit, 4 exponent bits (bias 7), 3 mantissa bits, no infinities, NaN = S.1111.111, the
// largest finite value 448. One definition of the conversion and of per-output-channel
// quantization for every place that makes or reads fp8 weights (the CPU engine, hearth-synth,
// the server's quantize-at-load and the GPU kernels' tests), so their bytes agree.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace hearth {

inline constexpr float kFp8E4m3Max = 448.0f;
inline constexpr uint8_t kFp8E4m3Nan = 0x7f;  // what encoding a NaN gives (as CUDA's cvt does)

constexpr float fp8_e4m3_to_f32(uint8_t b) {
  const bool negative = b & 0x80;
  const int exponent = (b >> 3) & 0xf;
  const int mantissa = b & 0x7;
  if (exponent == 0xf && mantissa == 0x7) return std::bit_cast<float>(0x7fc00000u);
  // Subnormals (exponent 0) are mantissa/8 · 2^-6; normals (1 + mantissa/8) · 2^(exponent-7).
  const float magnitude = exponent == 0
                              ? float(mantissa) * 0x1p-9f
                              : float(8 + mantissa) * 0x1p-3f * float(1u << exponent) * 0x1p-7f;
  return negative ? -magnitude : magnitude;
}

// Round to nearest, ties to even; saturating: every finite value (and ±inf) beyond ±448 becomes
// ±448, as CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3) and torch's clamped cast.
inline uint8_t f32_to_fp8_e4m3(float f) {
  if (std::isnan(f)) return kFp8E4m3Nan;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  const float a = std::fabs(f);
  if (a >= kFp8E4m3Max) return sign | 0x7e;
  int exponent2;
  std::frexp(a, &exponent2);  // a = fraction · 2^exponent2, fraction in [0.5, 1)
  const int unbiased = exponent2 - 1;
  unsigned code;
  if (a < 0x1p-6f) {
    // Subnormal steps of 2^-9; 8 steps rounds up into the smallest normal, which is code 8.
    code = unsigned(std::nearbyint(a * 0x1p9f));
  } else {
    // a / 2^unbiased is in [1, 2); its eighths above 1 are the mantissa, and a carry to 8
    // moves into the exponent, which the sum below does by itself.
    const float eighths = (std::ldexp(a, -unbiased) - 1.0f) * 8.0f;
    code = unsigned((unbiased + 7) << 3) + unsigned(std::nearbyint(eighths));
  }
  if (code > 0x7e) code = 0x7e;  // 0x7f is NaN: what rounds past 448 saturates
  return sign | uint8_t(code);
}

// Per-output-channel symmetric quantization, the FP8-dynamic checkpoints' weight scheme: a row's
// scale is its largest magnitude / 448 (1 for an all-zero row), its codes the row / scale
// rounded as above, and the row reads back as code · scale. Divisions in fp32, as on the GPU.
inline float fp8_e4m3_row_scale(float row_abs_max) {
  return row_abs_max > 0.0f ? row_abs_max / kFp8E4m3Max : 1.0f;
}
inline uint8_t fp8_e4m3_quantize(float value, float row_scale) {
  return f32_to_fp8_e4m3(value / row_scale);
}

}  // namespace hearth
