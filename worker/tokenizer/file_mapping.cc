#include "file_mapping.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace hearth::tok {
namespace {

// Closes the descriptor on every path out of the constructor; the mapping outlives it.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

[[noreturn]] void fail(const std::filesystem::path& path, const char* what) {
  throw std::runtime_error(path.string() + ": cannot " + what + ": " + std::strerror(errno));
}

}  // namespace

FileMapping::FileMapping(const std::filesystem::path& path) {
  // O_NONBLOCK: opening a FIFO would otherwise wait for a writer; it is refused below instead.
  const Fd file{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)};
  if (file.fd < 0) fail(path, "open");
  struct stat st {};
  if (::fstat(file.fd, &st) != 0) fail(path, "stat");
  if (!S_ISREG(st.st_mode))
    throw std::runtime_error(path.string() +
                             ": not a regular file (a directory, FIFO, socket or device)");
  size_ = static_cast<size_t>(st.st_size);
  if (size_ == 0) return;  // mmap refuses empty lengths; an empty view is what the file holds
  // MAP_POPULATE: every byte is about to be read (checksum, hashing), so fault it in at once.
  void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE | MAP_POPULATE, file.fd, 0);
  if (p == MAP_FAILED) fail(path, "map");
  data_ = static_cast<const std::byte*>(p);
}

FileMapping::~FileMapping() {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
}

}  // namespace hearth::tok
