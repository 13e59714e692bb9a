#include "ipc/printable.h"

#include <cstdint>

namespace hearth::ipc {
namespace {

// Length of the well-formed UTF-8 sequence at the start of `s`, or 0 if there is none
// (the Unicode standard's table 3-7 of well-formed byte sequences).
std::size_t sequence_length(std::string_view s) {
  const auto byte = [&](std::size_t i) { return static_cast<std::uint8_t>(s[i]); };
  const std::uint8_t b0 = byte(0);
  if (b0 < 0x80) return 1;
  std::size_t n = 0;
  std::uint8_t lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;  // no overlong forms
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;  // no overlong forms
    if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return 0;
  }
  if (s.size() < n || byte(1) < lo || byte(1) > hi) return 0;
  for (std::size_t i = 2; i < n; ++i)
    if ((byte(i) & 0xC0) != 0x80) return 0;
  return n;
}

}  // namespace

bool is_valid_utf8(std::string_view text) {
  while (!text.empty()) {
    const std::size_t n = sequence_length(text);
    if (n == 0) return false;
    text.remove_prefix(n);
  }
  return true;
}

std::string printable(std::string_view text, std::size_t max_bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size() < max_bytes ? text.size() : max_bytes);
  while (!text.empty()) {
    std::size_t n = sequence_length(text);
    const auto b = static_cast<std::uint8_t>(text[0]);
    const bool escape = n == 0 || b < 0x20 || b == 0x7F;
    if (escape) n = 1;
    const std::size_t grow = escape ? 4 : n;
    if (out.size() + grow > max_bytes) {
      out += "...";
      break;
    }
    if (escape) {
      out += "\\x";
      out += kHex[b >> 4];
      out += kHex[b & 0xF];
    } else {
      out.append(text.data(), n);
    }
    text.remove_prefix(n);
  }
  return out;
}

}  // namespace hearth::ipc
