#include "weight-server/model/model_directory.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace hearth {

namespace fs = std::filesystem;

namespace {

// O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
constexpr int kOpenFlags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY;

[[noreturn]] void fail(const fs::path& path, const std::string& why) {
  throw std::runtime_error(path.string() + ": " + why);
}

// openat2(2), which glibc does not wrap: `relative` resolved beneath `bound`, symbolic links
// followed only while they stay there. -1 with errno set on failure (ENOSYS before Linux 5.6).
int open_beneath(int bound, const std::string& relative) {
  open_how how{};
  how.flags = kOpenFlags;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  long fd = -1;
  // EAGAIN: a rename raced with a ".." in the path; the kernel asks for a retry.
  for (int attempt = 0; attempt < 8; ++attempt) {
    fd = ::syscall(SYS_openat2, bound, relative.c_str(), &how, sizeof how);
    if (fd >= 0 || errno != EAGAIN) break;
  }
  return static_cast<int>(fd);
}

// The directory's real path, as the kernel resolved it when it was opened.
fs::path real_path(int dir) {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/fd/" + std::to_string(dir), ec);
  return ec ? fs::path() : p;
}

}  // namespace

ModelDirectory ModelDirectory::open(const fs::path& dir) {
  ModelDirectory d;
  d.path_ = dir;
  d.dir_ = UniqueFd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!d.dir_.valid()) {
    if (errno == ENOENT || errno == ENOTDIR) fail(dir, "not a model directory (no such directory)");
    fail(dir, std::string("cannot open the model directory: ") + std::strerror(errno));
  }
  // A cache snapshot's links lead up to the repository folder's blobs/: bound by that folder.
  const fs::path real = real_path(d.dir_.get());
  const fs::path parent = real.parent_path();
  if (real.has_filename() && parent.filename() == "snapshots" &&
      parent.parent_path().filename().string().starts_with("models--")) {
    d.repository_ = UniqueFd(::openat(d.dir_.get(), "../..", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    d.prefix_ = "snapshots/" + real.filename().string() + "/";
  }
  return d;
}

UniqueFd ModelDirectory::open_file(std::string_view name) const {
  const fs::path shown = path_of(name);
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string_view::npos)
    fail(shown, "is not the name of a file inside the model directory");
  int fd = repository_.valid() ? open_beneath(repository_.get(), prefix_ + std::string(name))
                               : open_beneath(dir_.get(), std::string(name));
  // No openat2 (an old kernel, or a sandbox that forbids it): no symbolic links at all.
  if (fd < 0 && (errno == ENOSYS || errno == EPERM))
    fd = ::openat(dir_.get(), std::string(name).c_str(), kOpenFlags | O_NOFOLLOW);
  if (fd < 0) {
    const int error = errno;
    struct stat link {};
    switch (error) {
      case ENOENT:
        // Absent, unless it is a symbolic link to nothing.
        if (::fstatat(dir_.get(), std::string(name).c_str(), &link, AT_SYMLINK_NOFOLLOW) == 0)
          fail(shown, "is a symbolic link to a file that does not exist");
        return UniqueFd();
      case EXDEV:
        fail(shown,
             "leads outside the model directory (a symbolic link to a file elsewhere); model "
             "files are read only from inside it");
      case ELOOP:
        fail(shown,
             "is a symbolic link that is not followed here (a loop, a link through /proc, or "
             "a kernel without openat2)");
      case ENXIO:
        fail(shown, "is not a regular file (a socket)");
      default:
        fail(shown, std::string("cannot open: ") + std::strerror(error));
    }
  }
  UniqueFd file(fd);
  struct stat st {};
  if (::fstat(file.get(), &st) != 0)
    fail(shown, std::string("cannot stat: ") + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) fail(shown, "is a directory, not a file");
  if (!S_ISREG(st.st_mode)) fail(shown, "is not a regular file (a FIFO, socket or device)");
  return file;
}

std::optional<std::string> ModelDirectory::read(std::string_view name, size_t max_bytes) const {
  const UniqueFd file = open_file(name);
  if (!file.valid()) return std::nullopt;
  return read_file(file.get(), path_of(name), max_bytes);
}

}  // namespace hearth
