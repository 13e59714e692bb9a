#include "base/digest.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

#include <xxhash.h>

#include "base/unique_fd.h"

namespace hearth {

namespace {
struct StateDeleter {
  void operator()(XXH3_state_t* s) const { XXH3_freeState(s); }
};
Digest128 from_xxh(XXH128_hash_t h) {
  return {h.low64, h.high64};
}
}  // namespace

Digest128 xxh3_128(const void* data, size_t size) {
  return from_xxh(XXH3_128bits(data, size));
}

Digest128 xxh3_128_file(const std::filesystem::path& path) {
  const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY));
  if (!fd.valid())
    throw std::runtime_error(path.string() + ": cannot open: " + std::strerror(errno));
  std::unique_ptr<XXH3_state_t, StateDeleter> state(XXH3_createState());
  if (!state || XXH3_128bits_reset(state.get()) != XXH_OK)
    throw std::runtime_error("xxh3: cannot allocate a hash state");
  std::vector<char> buffer(size_t{4} << 20);
  while (true) {
    const ssize_t n = ::read(fd.get(), buffer.data(), buffer.size());
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(path.string() + ": read failed: " + std::strerror(errno));
    }
    XXH3_128bits_update(state.get(), buffer.data(), static_cast<size_t>(n));
  }
  return from_xxh(XXH3_128bits_digest(state.get()));
}

std::string to_hex(const Digest128& digest) {
  char buf[33];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(digest[1]),
                static_cast<unsigned long long>(digest[0]));
  return buf;
}

}  // namespace hearth
