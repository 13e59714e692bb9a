#include "base/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "base/unique_fd.h"

namespace hearth {

namespace {
std::string errno_text() {
  return std::strerror(errno);
}
}  // namespace

MappedFile MappedFile::open(const std::filesystem::path& path, Prefault prefault) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
  const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (!fd.valid()) throw std::runtime_error(path.string() + ": cannot open: " + errno_text());
  return map_file(fd.get(), path, prefault);
}

MappedFile MappedFile::map_file(int fd, const std::filesystem::path& path, Prefault prefault) {
  struct stat st {};
  if (fstat(fd, &st) != 0)
    throw std::runtime_error(path.string() + ": cannot stat: " + errno_text());
  if (S_ISDIR(st.st_mode)) throw std::runtime_error(path.string() + ": is a directory, not a file");
  if (!S_ISREG(st.st_mode))
    throw std::runtime_error(path.string() + ": is not a regular file (a FIFO, socket or device)");
  return map_fd(fd, static_cast<size_t>(st.st_size), path.string(), prefault);
}

MappedFile MappedFile::map_fd(int fd, size_t size, const std::string& label, Prefault prefault) {
  MappedFile m;
  if (size == 0) return m;  // mmap rejects empty lengths; an empty view is fine
  const int flags = MAP_SHARED | (prefault == Prefault::kYes ? MAP_POPULATE : 0);
  void* p = mmap(nullptr, size, PROT_READ, flags, fd, 0);
  if (p == MAP_FAILED) throw std::runtime_error(label + ": cannot map: " + errno_text());
  m.data_ = static_cast<const std::byte*>(p);
  m.size_ = size;
  return m;
}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void MappedFile::reset() {
  if (data_) munmap(const_cast<std::byte*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace hearth
