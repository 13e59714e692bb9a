// Writing a file so that readers see either the old content or the whole new one, never a
// part: a temporary file in the same directory, renamed over the target.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <filesystem>
#include <span>

namespace hearth::tok {

// Writes `bytes` to `path` atomically with permissions `mode`. Throws std::runtime_error naming
// the file and the system error; the temporary file is removed on failure.
void write_file_atomically(const std::filesystem::path& path, std::span<const std::byte> bytes,
                           mode_t mode);

// Creates `dir` and any missing parents with permissions `mode` (directories that exist are
// left as they are). Throws std::runtime_error naming the directory that could not be made.
void create_directories(const std::filesystem::path& dir, mode_t mode);

}  // namespace hearth::tok
