#include "ipc/wire_bytes.h"

#include <array>

namespace hearth::ipc {
namespace {

constexpr std::string_view kAlphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// Each character's 6-bit value, or -1 for a character outside the alphabet ('=' included).
constexpr std::array<std::int8_t, 256> make_values() {
  std::array<std::int8_t, 256> values{};
  for (auto& v : values) v = -1;
  for (std::size_t i = 0; i < kAlphabet.size(); ++i)
    values[static_cast<unsigned char>(kAlphabet[i])] = static_cast<std::int8_t>(i);
  return values;
}
constexpr std::array<std::int8_t, 256> kValues = make_values();

}  // namespace

std::string base64_encode(std::span<const std::byte> bytes) {
  std::string text;
  text.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const std::uint32_t n = std::uint32_t(bytes[i]) << 16 | std::uint32_t(bytes[i + 1]) << 8 |
                            std::uint32_t(bytes[i + 2]);
    text += kAlphabet[n >> 18];
    text += kAlphabet[(n >> 12) & 63];
    text += kAlphabet[(n >> 6) & 63];
    text += kAlphabet[n & 63];
  }
  const std::size_t left = bytes.size() - i;
  if (left > 0) {
    std::uint32_t n = std::uint32_t(bytes[i]) << 16;
    if (left == 2) n |= std::uint32_t(bytes[i + 1]) << 8;
    text += kAlphabet[n >> 18];
    text += kAlphabet[(n >> 12) & 63];
    text += left == 2 ? kAlphabet[(n >> 6) & 63] : '=';
    text += '=';
  }
  return text;
}

std::size_t base64_decoded_size_bound(std::string_view text) {
  return text.size() % 4 == 0 ? text.size() / 4 * 3 : 0;
}

std::optional<std::vector<std::byte>> base64_decode(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::size_t padding = 0;
  if (!text.empty() && text.back() == '=') padding = text[text.size() - 2] == '=' ? 2 : 1;
  std::vector<std::byte> bytes;
  bytes.reserve(text.size() / 4 * 3);
  for (std::size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    const std::size_t real = last ? 4 - padding : 4;  // characters that carry bits
    std::uint32_t n = 0;
    for (std::size_t k = 0; k < 4; ++k) {
      std::int8_t v = 0;
      if (k < real) {
        v = kValues[static_cast<unsigned char>(text[i + k])];
        if (v < 0) return std::nullopt;
      }
      n = n << 6 | std::uint32_t(v);
    }
    bytes.push_back(std::byte(n >> 16));
    if (real >= 3) bytes.push_back(std::byte((n >> 8) & 0xff));
    if (real == 4) bytes.push_back(std::byte(n & 0xff));
    // The bits past the last whole byte must be zero: one spelling per byte string.
    if ((real == 2 && (n & 0xffff) != 0) || (real == 3 && (n & 0xff) != 0)) return std::nullopt;
  }
  return bytes;
}

void put_u64(std::vector<std::byte>& out, std::uint64_t value) {
  for (int i = 0; i < 8; ++i) out.push_back(std::byte((value >> (8 * i)) & 0xff));
}

void put_u32(std::vector<std::byte>& out, std::uint32_t value) {
  for (int i = 0; i < 4; ++i) out.push_back(std::byte((value >> (8 * i)) & 0xff));
}

std::uint64_t get_u64(std::span<const std::byte> bytes, std::size_t at) {
  std::uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = value << 8 | std::uint64_t(bytes[at + std::size_t(i)]);
  return value;
}

std::uint32_t get_u32(std::span<const std::byte> bytes, std::size_t at) {
  std::uint32_t value = 0;
  for (int i = 3; i >= 0; --i) value = value << 8 | std::uint32_t(bytes[at + std::size_t(i)]);
  return value;
}

}  // namespace hearth::ipc
