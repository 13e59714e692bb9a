// XXH3-128 digests: the tokenizer image's checksum and the tokenizer cache's content key.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "image_format.h"

namespace hearth::tok {

Digest128 xxh3_128(const void* data, size_t size);
inline Digest128 xxh3_128(std::string_view bytes) {
  return xxh3_128(bytes.data(), bytes.size());
}

// 32 lowercase hex digits, high half first (as XXH3's canonical form prints).
std::string to_hex(const Digest128& digest);

}  // namespace hearth::tok
