#include "ipc/printable.h"

#include <cstdint>

#include "base/hex_digits.h"

namespace hearth::ipc {

std::string printable(std::string_view text, std::size_t max_bytes) {
  std::string out;
  out.reserve(text.size() < max_bytes ? text.size() : max_bytes);
  while (!text.empty()) {
    std::size_t n = utf8_char_length(text);
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
      append_hex(out, b, 2);
    } else {
      out.append(text.data(), n);
    }
    text.remove_prefix(n);
  }
  return out;
}

}  // namespace hearth::ipc
