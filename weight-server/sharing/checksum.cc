#include "weight-server/sharing/checksum.h"

#include <xxhash.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

namespace hearth {

uint64_t xxh3_checksum(std::span<const std::byte> bytes) {
  return XXH3_64bits(bytes.data(), bytes.size());
}

uint64_t xxh3_checksum_as_stored(std::span<const std::byte> source, DType from, DType to) {
  if (from == to) return xxh3_checksum(source);
  if (from != DType::F32 || to != DType::BF16)
    throw std::runtime_error("no conversion from " + std::string(dtype_name(from)) + " to " +
                             std::string(dtype_name(to)) + " is defined for stored weights");
  // Converted in slices so an f32 embedding of a few GB needs no second copy of itself.
  constexpr size_t kSlice = 1 << 16;
  std::vector<uint16_t> out(kSlice);
  Xxh3Stream stream;
  const size_t n = source.size() / 4;
  for (size_t start = 0; start < n; start += kSlice) {
    const size_t count = std::min(kSlice, n - start);
    for (size_t i = 0; i < count; ++i) {
      float f;
      std::memcpy(&f, source.data() + 4 * (start + i), 4);
      out[i] = f32_to_bf16(f);
    }
    stream.update(std::as_bytes(std::span(out.data(), count)));
  }
  return stream.digest();
}

Xxh3Stream::Xxh3Stream() : state_(XXH3_createState()) {
  if (state_ == nullptr) throw std::bad_alloc();
  XXH3_64bits_reset(static_cast<XXH3_state_t*>(state_));
}

Xxh3Stream::~Xxh3Stream() {
  XXH3_freeState(static_cast<XXH3_state_t*>(state_));
}

void Xxh3Stream::update(std::span<const std::byte> bytes) {
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state_), bytes.data(), bytes.size());
}

uint64_t Xxh3Stream::digest() const {
  return XXH3_64bits_digest(static_cast<const XXH3_state_t*>(state_));
}

std::string checksum_to_hex(uint64_t checksum) {
  std::array<char, 17> text{};
  std::snprintf(text.data(), text.size(), "%016llx", static_cast<unsigned long long>(checksum));
  return text.data();
}

std::optional<uint64_t> checksum_from_hex(std::string_view text) {
  if (text.size() != 16) return std::nullopt;
  uint64_t value = 0;
  for (char c : text) {
    int digit;
    if (c >= '0' && c <= '9')
      digit = c - '0';
    else if (c >= 'a' && c <= 'f')
      digit = c - 'a' + 10;
    else
      return std::nullopt;
    value = value << 4 | uint64_t(digit);
  }
  return value;
}

}  // namespace hearth
