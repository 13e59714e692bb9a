// hearth's one e4m3 encoder, in integer arithmetic so that host and device give the same bits
// without relying on a conversion instruction's rounding: round to nearest, ties to even,
// saturating to ±448, NaN -> 0x7f. The GPU kernels call it, and weight-server/model/fp8.h
// (f32_to_fp8_e4m3) for everything made on the host; tests/kernels/fp8_e4m3_test.cc checks it
// against an encoder written with other arithmetic (frexp and rint).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define HEARTH_HOST_DEVICE __host__ __device__
#else
#define HEARTH_HOST_DEVICE
#endif

namespace hearth::kernels {

// Rounds q + rem / 2^shift to the nearest integer, ties to even (1 <= shift <= 31).
HEARTH_HOST_DEVICE inline uint32_t round_shifted_even(uint32_t value, int shift) {
  const uint32_t q = value >> shift, rem = value & ((1u << shift) - 1), half = 1u << (shift - 1);
  return q + ((rem > half || (rem == half && (q & 1))) ? 1u : 0u);
}

HEARTH_HOST_DEVICE inline uint8_t encode_e4m3(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint8_t sign = uint8_t((u >> 24) & 0x80);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7f;          // NaN
  if (a >= 0x43e00000u) return sign | 0x7e;  // >= 448 (and inf): saturate
  if (a < 0x3c800000u) {                     // below 2^-6: e4m3 subnormals, steps of 2^-9
    const int exponent = int(a >> 23);       // value = mantissa * 2^(exponent - 150)
    if (exponent == 0) return sign;          // an f32 subnormal is far below 2^-10
    const uint32_t mantissa = (a & 0x7fffffu) | 0x800000u;
    const int shift = 141 - exponent;  // value * 2^9 = mantissa / 2^shift; >= 21
    if (shift > 24) return sign;       // below a quarter step: rounds to zero
    return sign | uint8_t(round_shifted_even(mantissa, shift));  // 8 is the smallest normal
  }
  // Normal: rebias the exponent (127 -> 7) and keep 3 of 23 mantissa bits; a carry out of the
  // mantissa moves into the exponent, which is the right result.
  const uint32_t code = round_shifted_even(a - (120u << 23), 20);
  return sign | uint8_t(code > 0x7e ? 0x7e : code);
}

// An e4m3 code's value (exact in fp32), by bit assembly so host and device agree; the NaN
// code 0x7f (which encode_e4m3 gives only for a NaN) reads as NaN.
HEARTH_HOST_DEVICE inline float decode_e4m3(uint8_t b) {
  const uint32_t sign = uint32_t(b & 0x80) << 24, e = (b >> 3) & 0xf, m = b & 0x7;
  uint32_t bits;
  if (e == 0xf && m == 0x7) {
    bits = 0x7fc00000u;
  } else if (e == 0) {                        // subnormal: m / 8 * 2^-6, exact as a float product
    const float f = float(m) * 0.001953125f;  // 2^-9
    std::memcpy(&bits, &f, 4);
  } else {  // (1 + m / 8) * 2^(e - 7): fp32 exponent e - 7 + 127, the mantissa's top 3 bits m
    bits = ((e + 120u) << 23) | (m << 20);
  }
  bits |= sign;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace hearth::kernels
