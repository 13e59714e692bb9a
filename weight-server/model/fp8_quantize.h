// One row of a 16- or 32-bit weight made fp8 by the contract's rule (fp8.h): hearth-synth's
// offline checkpoints and the server's quantize-at-load both call this, so their bytes agree.
#pragma once

#include <cmath>
#include <cstdint>

#include "weight-server/model/dtype.h"
#include "weight-server/model/fp8.h"

namespace hearth {

// Writes the `n` codes of row `src` (of an unscaled dtype) to `codes`; returns the row's scale.
inline float quantize_row_fp8(const void* src, DType dtype, int64_t n, uint8_t* codes) {
  float abs_max = 0.0f;
  for (int64_t i = 0; i < n; ++i)
    abs_max = std::fmax(abs_max, std::fabs(load_as_f32(src, dtype, i)));
  const float scale = fp8_e4m3_row_scale(abs_max);
  for (int64_t i = 0; i < n; ++i) codes[i] = fp8_e4m3_quantize(load_as_f32(src, dtype, i), scale);
  return scale;
}

}  // namespace hearth
