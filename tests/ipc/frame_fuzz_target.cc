// libFuzzer entry point for the frame codec (HEARTH_LIBFUZZER=ON, clang): the same invariants
// as the seeded tests (frame_fuzz.h), on whatever bytes the fuzzer tries.
#include <cstdio>
#include <cstdlib>

#include "tests/ipc/frame_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const std::string why = hearth::fuzz::check_frame_bytes(bytes, size);
  if (!why.empty()) {
    std::fprintf(stderr, "frame fuzz invariant broken: %s\n", why.c_str());
    std::abort();
  }
  return 0;
}
