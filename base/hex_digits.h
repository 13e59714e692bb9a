// Lower-case hexadecimal digits for the escapes hearth writes into messages and generated text
// (0xNN, \xNN, \uNNNN, \UNNNNNNNN), so that every such escape spells its digits one way.
#pragma once

#include <cstdint>
#include <string>

namespace hearth {

inline constexpr char kHexDigits[] = "0123456789abcdef";

// Appends the `digits` lowest hex digits of `value` to `out`, most significant first
// (append_hex(out, 0x2f, 4) appends "002f").
inline void append_hex(std::string& out, uint32_t value, int digits) {
  for (int d = digits - 1; d >= 0; --d) out.push_back(kHexDigits[(value >> (4 * d)) & 0xF]);
}

}  // namespace hearth
