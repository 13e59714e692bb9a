// The kernels' integer e4m3 encoder (kernels/fp8_e4m3.h, used on the device) against the one
// definition in weight-server/model/fp8.h, and the refusal of fp8 off Hopper. No GPU needed.
#include "kernels/fp8_e4m3.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <limits>
#include <random>

#include "kernels/fp8_support.h"
#include "weight-server/model/fp8.h"

namespace hearth {
namespace {

void expect_same(float f) {
  ASSERT_EQ(int(f32_to_fp8_e4m3(f)), int(kernels::encode_e4m3(f)))
      << "f32 bits 0x" << std::hex << std::bit_cast<uint32_t>(f) << " (" << f << ")";
}

TEST(Fp8E4m3Encoder, EqualsTheSpecCodeAtEveryTieAndItsNeighbours) {
  // Every value halfway between two adjacent e4m3 values of the same sign (and between the
  // largest and 480, past which saturation takes over), one f32 ulp either side, and the values.
  for (int sign = 0; sign < 2; ++sign)
    for (int code = 0; code < 0x7e; ++code) {
      const uint8_t c = uint8_t(code | (sign << 7));
      const float lo = fp8_e4m3_to_f32(c), hi = fp8_e4m3_to_f32(uint8_t(c + 1));
      const float mid = lo + (hi - lo) / 2;  // exact: a few bits of mantissa
      for (float f : {lo, hi, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f),
                      std::nextafter(mid, -1e9f)})
        expect_same(f);
    }
  for (float f : {448.0f, 464.0f, 479.9f, 480.0f, 1e30f, std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN(), 0x1p-10f, 0x1p-11f, 0x1.8p-10f,
                  std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min()}) {
    expect_same(f);
    expect_same(-f);
  }
}

TEST(Fp8E4m3Encoder, EqualsTheSpecCodeAcrossTheFloatRange) {
  // A stride through every f32 bit pattern (both signs, NaNs, subnormals), then random ones.
  for (uint64_t u = 0; u <= 0xffffffffu; u += 4099) expect_same(std::bit_cast<float>(uint32_t(u)));
  std::mt19937 gen(std::random_device{}());
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 1000000; ++i) expect_same(std::bit_cast<float>(bits(gen)));
}

TEST(Fp8Support, OnlyHopperRunsFp8AndOthersAreToldWhy) {
  EXPECT_EQ("", kernels::fp8_matmul_refusal(9, 0));
  for (auto [major, minor] : {std::pair{8, 0}, {8, 6}, {8, 9}, {10, 0}, {12, 0}}) {
    const std::string why = kernels::fp8_matmul_refusal(major, minor);
    EXPECT_NE(why.find("fp8"), std::string::npos) << why;
    EXPECT_NE(why.find(std::to_string(major) + "." + std::to_string(minor)), std::string::npos)
        << why;
    EXPECT_NE(why.find("bf16"), std::string::npos) << why;
  }
}

}  // namespace
}  // namespace hearth
