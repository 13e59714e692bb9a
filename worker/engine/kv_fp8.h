// The fp8 KV cache's one rule (engine option kv_cache_dtype fp8_e4m3): a token's keys (or
// values) of one KV head, head_dim numbers, become head_dim e4m3 codes and one fp32 scale,
// their largest magnitude / 448 (1 when all are zero), each code the number / scale rounded as
// weight-server/model/fp8.h rounds. They read back as code x scale in fp32. A token's codes
// depend on its own numbers only, so the cache stays batch- and chunking-invariant.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>

#include "weight-server/model/fp8.h"

namespace hearth {

// Returns the scale; writes n codes.
inline float kv_fp8_quantize(const float* x, int64_t n, uint8_t* codes) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  const float scale = fp8_e4m3_row_scale(amax);
  for (int64_t i = 0; i < n; ++i) codes[i] = fp8_e4m3_quantize(x[i], scale);
  return scale;
}

// Every code's value, so reading a row is a table look-up and one multiply per number.
inline const std::array<float, 256>& fp8_e4m3_values() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int b = 0; b < 256; ++b) t[size_t(b)] = fp8_e4m3_to_f32(uint8_t(b));
    return t;
  }();
  return table;
}

inline void kv_fp8_dequantize(const uint8_t* codes, float scale, int64_t n, float* out) {
  const std::array<float, 256>& value = fp8_e4m3_values();
  for (int64_t i = 0; i < n; ++i) out[i] = value[codes[i]] * scale;
}

}  // namespace hearth
