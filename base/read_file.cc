#include "base/read_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "base/unique_fd.h"

namespace hearth {

namespace {

[[noreturn]] void fail(const std::filesystem::path& path, const std::string& why) {
  throw std::runtime_error(path.string() + ": " + why);
}

}  // namespace

std::string read_file(const std::filesystem::path& path, size_t max_bytes) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (fd.get() < 0) fail(path, std::string("cannot open: ") + std::strerror(errno));
  return read_file(fd.get(), path, max_bytes);
}

std::string read_file(int fd, const std::filesystem::path& path, size_t max_bytes) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail(path, std::string("cannot stat: ") + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) fail(path, "is a directory, not a file");
  if (!S_ISREG(st.st_mode)) fail(path, "is not a regular file (a FIFO, socket or device)");
  if (size_t(st.st_size) > max_bytes)
    fail(path, "is " + std::to_string(st.st_size) + " bytes, more than the " +
                   std::to_string(max_bytes) + " allowed");
  std::string out(size_t(st.st_size), '\0');
  size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = ::read(fd, out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(path, std::string("read failed: ") + std::strerror(errno));
    if (n == 0) break;  // shrank under us: return what is there
    got += size_t(n);
  }
  out.resize(got);
  return out;
}

}  // namespace hearth
