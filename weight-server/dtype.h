// Element types hearth stores weights in, and the scalar conversions the CPU engine uses to
// compute from bf16/f16 weights directly (fp32 arithmetic, no per-worker converted copy).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace hearth {

enum class DType : uint8_t { F32, F16, BF16 };

constexpr size_t dtype_size(DType t) {
  return t == DType::F32 ? 4 : 2;
}

// Safetensors spelling: "F32", "F16", "BF16".
constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32:
      return "F32";
    case DType::F16:
      return "F16";
    case DType::BF16:
      return "BF16";
  }
  return "?";
}

constexpr std::optional<DType> parse_dtype(std::string_view s) {
  if (s == "F32") return DType::F32;
  if (s == "F16") return DType::F16;
  if (s == "BF16") return DType::BF16;
  return std::nullopt;
}

inline float bf16_to_f32(uint16_t h) {
  return std::bit_cast<float>(uint32_t(h) << 16);
}

// Round to nearest even, as torch does; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

inline float f16_to_f32(uint16_t h) {
  return static_cast<float>(std::bit_cast<_Float16>(h));
}
inline uint16_t f32_to_f16(float f) {
  return std::bit_cast<uint16_t>(static_cast<_Float16>(f));
}

// Reads element i of a weight stored as `t` into fp32.
inline float load_as_f32(const void* base, DType t, size_t i) {
  switch (t) {
    case DType::F32: {
      float v;
      std::memcpy(&v, static_cast<const std::byte*>(base) + 4 * i, 4);
      return v;
    }
    case DType::F16:
      return f16_to_f32(static_cast<const uint16_t*>(base)[i]);
    case DType::BF16:
      return bf16_to_f32(static_cast<const uint16_t*>(base)[i]);
  }
  return 0.0f;
}

}  // namespace hearth
