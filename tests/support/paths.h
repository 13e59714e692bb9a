// Where tests find the source tree's data (golden files, suites). Compiled in, but overridable
// with HEARTH_SOURCE_DIR so binaries built on one machine run from a checkout on another.
#pragma once

#include <cstdlib>
#include <filesystem>

namespace hearth::test {

inline std::filesystem::path source_dir() {
  if (const char* env = std::getenv("HEARTH_SOURCE_DIR")) return env;
  return HEARTH_SOURCE_DIR;
}

}  // namespace hearth::test
