#include "proof/checksum.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

#include <xxhash.h>

namespace hearth::proof {

namespace {

struct StateDeleter {
  void operator()(XXH3_state_t* s) const { XXH3_freeState(s); }
};
struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

std::string hex(XXH128_hash_t hash) {
  XXH128_canonical_t canonical;
  XXH128_canonicalFromHash(&canonical, hash);  // big-endian bytes: the same text everywhere
  static const char digits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char byte : canonical.digest) {
    out += digits[byte >> 4];
    out += digits[byte & 15];
  }
  return out;
}

}  // namespace

std::string xxh3_bytes(std::string_view bytes) {
  return hex(XXH3_128bits(bytes.data(), bytes.size()));
}

std::string xxh3_file(const std::filesystem::path& path) {
  std::unique_ptr<std::FILE, FileCloser> file(std::fopen(path.c_str(), "rb"));
  if (!file) throw std::runtime_error(path.string() + ": cannot open: " + std::strerror(errno));
  std::unique_ptr<XXH3_state_t, StateDeleter> state(XXH3_createState());
  if (!state || XXH3_128bits_reset(state.get()) != XXH_OK)
    throw std::runtime_error("xxh3: cannot allocate a hash state");
  std::vector<char> buffer(size_t{4} << 20);
  size_t n = 0;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), file.get())) > 0)
    XXH3_128bits_update(state.get(), buffer.data(), n);
  if (std::ferror(file.get()))
    throw std::runtime_error(path.string() + ": read failed: " + std::strerror(errno));
  return hex(XXH3_128bits_digest(state.get()));
}

}  // namespace hearth::proof
