// The e4m3 conversions against the spec, value by value: every one of the 256 codes decoded by an
// independent formula, every finite code read back exactly, ties to even, saturation, NaN, and
// fresh random floats against a brute-force search for the nearest code.
#include "weight-server/model/fp8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

namespace hearth {
namespace {

// The spec's value of a code, written with ldexp instead of fp8.h's products.
double spec_value(int code) {
  const int sign = code >> 7, exponent = (code >> 3) & 15, mantissa = code & 7;
  const double magnitude = exponent == 0 ? std::ldexp(mantissa / 8.0, -6)
                                         : std::ldexp(1.0 + mantissa / 8.0, exponent - 7);
  return sign ? -magnitude : magnitude;
}
bool is_nan_code(int code) {
  return (code & 0x7f) == 0x7f;
}

TEST(Fp8E4m3, EveryCodeDecodesToTheSpecValue) {
  for (int code = 0; code < 256; ++code) {
    const float value = fp8_e4m3_to_f32(uint8_t(code));
    if (is_nan_code(code)) {
      EXPECT_TRUE(std::isnan(value)) << code;
      continue;
    }
    EXPECT_EQ(double(value), spec_value(code)) << code;
  }
  EXPECT_EQ(fp8_e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), 0x1p-9f);  // the smallest subnormal
  EXPECT_EQ(fp8_e4m3_to_f32(0x08), 0x1p-6f);  // the smallest normal
  EXPECT_TRUE(std::signbit(fp8_e4m3_to_f32(0x80)));
}

TEST(Fp8E4m3, EveryFiniteCodeReadsBackExactly) {
  for (int code = 0; code < 256; ++code) {
    if (is_nan_code(code)) continue;
    EXPECT_EQ(f32_to_fp8_e4m3(fp8_e4m3_to_f32(uint8_t(code))), code) << code;
  }
}

TEST(Fp8E4m3, MidpointsRoundToTheEvenCode) {
  for (int code = 0; code < 0x7e; ++code) {
    const double low = spec_value(code), high = spec_value(code + 1);
    const float mid = float((low + high) / 2);  // exact: a few more mantissa bits than e4m3
    ASSERT_EQ(double(mid), (low + high) / 2);
    const int even = code % 2 == 0 ? code : code + 1;
    EXPECT_EQ(f32_to_fp8_e4m3(mid), even) << "between " << code << " and " << code + 1;
    EXPECT_EQ(f32_to_fp8_e4m3(-mid), 0x80 | even);
    EXPECT_EQ(f32_to_fp8_e4m3(std::nextafter(mid, 0.0f)), code);
    EXPECT_EQ(f32_to_fp8_e4m3(std::nextafter(mid, 1e9f)), code + 1);
  }
}

TEST(Fp8E4m3, SaturatesAndKeepsNan) {
  EXPECT_EQ(f32_to_fp8_e4m3(448.0f), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(463.9f), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(464.0f), 0x7e);  // would round to 480, which e4m3 lacks
  EXPECT_EQ(f32_to_fp8_e4m3(1e30f), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(std::numeric_limits<float>::infinity()), 0x7e);
  EXPECT_EQ(f32_to_fp8_e4m3(-std::numeric_limits<float>::infinity()), 0xfe);
  EXPECT_EQ(f32_to_fp8_e4m3(std::numeric_limits<float>::quiet_NaN()), kFp8E4m3Nan);
  EXPECT_EQ(f32_to_fp8_e4m3(0x1p-11f), 0x00);  // below half the smallest subnormal
  EXPECT_EQ(f32_to_fp8_e4m3(-0.0f), 0x80);
  EXPECT_EQ(f32_to_fp8_e4m3(std::numeric_limits<float>::denorm_min()), 0x00);
}

TEST(Fp8E4m3, RandomFloatsGoToTheNearestCode) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> log_magnitude(-14.0f, 10.0f);
  for (int i = 0; i < 20000; ++i) {
    const float x = std::exp2(log_magnitude(rng)) * (rng() % 2 ? -1.0f : 1.0f);
    int best = -1;
    double best_distance = 1e300;
    for (int code = 0; code < 256; ++code) {
      if (is_nan_code(code) || (code == 0x80)) continue;
      const double distance = std::fabs(spec_value(code) - double(x));
      if (distance < best_distance || (distance == best_distance && (code & 1) == 0)) {
        best = code;
        best_distance = distance;
      }
    }
    const int got = f32_to_fp8_e4m3(x);
    // ±0 both decode to zero: compare values, and codes where the value is not zero.
    EXPECT_EQ(double(fp8_e4m3_to_f32(uint8_t(got))), spec_value(best)) << x;
    if (spec_value(best) == 0) {
      EXPECT_EQ(got & 0x7f, 0) << x;
    }
  }
}

TEST(Fp8E4m3, RowScaleMapsTheLargestMagnitudeTo448) {
  EXPECT_EQ(fp8_e4m3_row_scale(0.0f), 1.0f);
  const float scale = fp8_e4m3_row_scale(3.5f);
  EXPECT_EQ(scale, 3.5f / 448.0f);
  EXPECT_EQ(fp8_e4m3_quantize(3.5f, scale), 0x7e);
  EXPECT_EQ(fp8_e4m3_quantize(-3.5f, scale), 0xfe);
  EXPECT_EQ(fp8_e4m3_quantize(0.0f, scale), 0x00);
}

}  // namespace
}  // namespace hearth
