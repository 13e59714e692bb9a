// The launches the tiling tests (kernels/matmul_tiling.h) ask about: an H100's 132 SMs and
// 16-bit operands, whose four-box stage covers 256 of K.
#pragma once

#include <array>
#include <cstdint>

#include "kernels/matmul_tiling.h"

namespace hearth::kernels::tiling {

inline constexpr int64_t kH100Sms = 132;
inline constexpr int kFourBoxes = 256;  // four 64-wide K boxes of 16-bit values

inline LaunchShape shape(int m, std::array<int, 3> widths, int k, bool swiglu = false) {
  return LaunchShape{m, widths, k, swiglu, kFourBoxes, kH100Sms};
}

}  // namespace hearth::kernels::tiling
