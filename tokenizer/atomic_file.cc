#include "atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace hearth::tok {
namespace {

[[noreturn]] void fail(const std::filesystem::path& path, const std::string& what, int error) {
  throw std::runtime_error("cannot " + what + " " + path.string() + ": " + std::strerror(error));
}

}  // namespace

void write_file_atomically(const std::filesystem::path& path, std::span<const std::byte> bytes,
                           mode_t mode) {
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : ".";
  std::string temp = (dir / ("." + path.filename().string() + ".XXXXXX")).string();
  const int fd = ::mkostemp(temp.data(), O_CLOEXEC);
  if (fd < 0) fail(temp, "create", errno);
  // The first failing step and its errno; the temporary file goes away on any failure.
  const char* failed = nullptr;
  int error = 0;
  auto check = [&](bool ok, const char* step) {
    if (!ok && failed == nullptr) {
      failed = step;
      error = errno;
    }
  };
  for (size_t done = 0; done < bytes.size() && failed == nullptr;) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    check(n >= 0, "write");
    if (n > 0) done += static_cast<size_t>(n);
  }
  // mkostemp made it 0600; fchmod is not subject to the umask.
  if (failed == nullptr) check(::fchmod(fd, mode) == 0, "set the permissions of");
  check(::close(fd) == 0, "write");
  if (failed != nullptr) {
    ::unlink(temp.c_str());
    fail(temp, failed, error);
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    error = errno;
    ::unlink(temp.c_str());
    fail(path, "rename " + temp + " to", error);
  }
}

void create_directories(const std::filesystem::path& dir, mode_t mode) {
  std::filesystem::path prefix;
  for (const std::filesystem::path& part : dir) {
    prefix /= part;
    if (::mkdir(prefix.c_str(), mode) != 0 && errno != EEXIST) {
      fail(prefix, "create directory", errno);
    }
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) fail(dir, "create directory", errno);
  if (!S_ISDIR(st.st_mode)) fail(dir, "use directory", ENOTDIR);
}

}  // namespace hearth::tok
