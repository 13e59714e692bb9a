// Reading a whole small file (configs, tokenizers, profiles, suites): regular files only, never
// more than a cap, so a FIFO, a device or a runaway file gives a clear error instead of a hang
// or an exhausted memory.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>

namespace hearth {

// Generous for every text file a model or a run needs (Llama 3's tokenizer.json is 9 MB).
inline constexpr size_t kMaxTextFileBytes = size_t(256) << 20;

// The file's bytes. Throws std::runtime_error naming the path when it cannot be opened, is not
// a regular file (a directory, FIFO, socket or device) or is larger than `max_bytes`.
std::string read_file(const std::filesystem::path& path, size_t max_bytes = kMaxTextFileBytes);

// The same for a file already open (e.g. beneath a model directory); `path` names it in errors.
std::string read_file(int fd, const std::filesystem::path& path,
                      size_t max_bytes = kMaxTextFileBytes);

}  // namespace hearth
