#include "digest.h"

#include <cstdio>

#include <xxhash.h>

namespace hearth::tok {

Digest128 xxh3_128(const void* data, size_t size) {
  const XXH128_hash_t h = XXH3_128bits(data, size);
  return {h.low64, h.high64};
}

std::string to_hex(const Digest128& digest) {
  char buf[33];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(digest[1]),
                static_cast<unsigned long long>(digest[0]));
  return buf;
}

}  // namespace hearth::tok
