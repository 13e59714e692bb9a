// Element types hearth stores weights in, and the scalar conversions the CPU engine uses to
// compute from bf16/f16 weights directly (fp32 arithmetic, no per-worker converted copy).
// F8_E4M3 holds fp8 codes whose values need a scale stored beside them (see fp8.h).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string_view>

#include "weight-server/model/fp8.h"

namespace hearth {

enum class DType : uint8_t { F32, F16, BF16, F8_E4M3 };

// Every element type hearth knows, with its size and safetensors spelling. Adding a type (fp8,
// say) means adding a row here; every switch below then fails to compile until it is handled,
// instead of a size silently defaulting.
struct DTypeInfo {
  DType type;
  std::string_view name;
  size_t size;
};
inline constexpr DTypeInfo kDTypes[] = {
    {DType::F32, "F32", 4},
    {DType::F16, "F16", 2},
    {DType::BF16, "BF16", 2},
    {DType::F8_E4M3, "F8_E4M3", 1},
};

constexpr const DTypeInfo& dtype_info(DType t) {
  for (const DTypeInfo& info : kDTypes)
    if (info.type == t) return info;
  // An enumerator without a row is a bug caught at compile time (see the static_assert below)
  // or, for a value cast from garbage, a loud failure rather than a guessed size.
  throw std::logic_error("dtype_info: a DType without a row in kDTypes");
}

constexpr size_t dtype_size(DType t) {
  return dtype_info(t).size;
}

// Safetensors spelling: "F32", "F16", "BF16", "F8_E4M3".
constexpr std::string_view dtype_name(DType t) {
  return dtype_info(t).name;
}

// Any other spelling (I8, F8_E5M2, F64, ...) is not a type hearth computes with: nullopt.
constexpr std::optional<DType> parse_dtype(std::string_view s) {
  for (const DTypeInfo& info : kDTypes)
    if (info.name == s) return info.type;
  return std::nullopt;
}

static_assert(dtype_size(DType::F32) == 4 && dtype_size(DType::F16) == 2 &&
              dtype_size(DType::BF16) == 2 && dtype_size(DType::F8_E4M3) == 1 &&
              parse_dtype("BF16") == DType::BF16 && parse_dtype("F8_E4M3") == DType::F8_E4M3 &&
              !parse_dtype("F8_E5M2"));

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

// Whether an element of `t` is a value by itself (F32, F16, BF16) or a code that means nothing
// without its scale tensor (F8_E4M3).
constexpr bool dtype_is_scaled(DType t) {
  return t == DType::F8_E4M3;
}

// Reads element i of a weight stored as `t` into fp32. For an fp8 weight that is the value
// times `scale`, the element's row (or tensor) scale, which the caller must pass: an fp8 code
// read without its scale is not the weight.
inline float load_as_f32(const void* base, DType t, size_t i, float scale) {
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
    case DType::F8_E4M3:
      return fp8_e4m3_to_f32(static_cast<const uint8_t*>(base)[i]) * scale;
  }
  return 0.0f;
}

// The same for the unscaled types (norms, biases, embeddings, 16-bit matrices): an fp8 code
// here is a caller's bug (its scale is lost), refused loudly instead of read as 1.
inline float load_as_f32(const void* base, DType t, size_t i) {
  if (dtype_is_scaled(t))
    throw std::logic_error("load_as_f32: an F8_E4M3 element read without its scale");
  return load_as_f32(base, t, i, 1.0f);
}

}  // namespace hearth
