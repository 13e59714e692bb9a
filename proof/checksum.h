// Content checksums for the report: XXH3-128 as 32 hex digits, of a file (streamed, so
// multi-gigabyte weight shards cost no memory) or of bytes in memory.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace hearth::proof {

// Throws std::runtime_error naming the file when it cannot be read.
std::string xxh3_file(const std::filesystem::path& path);
std::string xxh3_bytes(std::string_view bytes);

}  // namespace hearth::proof
