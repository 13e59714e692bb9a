// --prompt-file: a prompt too long for the command line (argv holds at most 128 KiB per
// argument), from a file or from stdin.
#pragma once

#include <cstddef>
#include <string>

namespace hearth {

// Far more text than any context holds, small enough to read whole.
inline constexpr size_t kMaxPromptBytes = size_t(64) << 20;

// The bytes of `path` exactly as stored (a final newline included), or all of stdin for "-".
// A path must name a regular file (base/read_file.h's rules). Throws
// std::runtime_error naming the path (or "stdin") when it cannot be read or holds more than
// kMaxPromptBytes.
std::string read_prompt_file(const std::string& path);

}  // namespace hearth
