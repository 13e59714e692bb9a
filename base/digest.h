// XXH3-128 digests: the tokenizer image's checksum and cache key, the proof report's checksums
// of files and suites. One text form everywhere: 32 lowercase hex digits, high half first (as
// XXH3's canonical form prints).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace hearth {

// A 128-bit XXH3 digest as (low, high).
using Digest128 = std::array<uint64_t, 2>;

Digest128 xxh3_128(const void* data, size_t size);
inline Digest128 xxh3_128(std::string_view bytes) {
  return xxh3_128(bytes.data(), bytes.size());
}

// Of a whole file, streamed (multi-gigabyte weight shards cost no memory). Throws
// std::runtime_error naming the file when it cannot be read.
Digest128 xxh3_128_file(const std::filesystem::path& path);

std::string to_hex(const Digest128& digest);

}  // namespace hearth
