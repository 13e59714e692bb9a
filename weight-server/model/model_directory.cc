#include "weight-server/model/model_directory.h"

#include <fcntl.h>
#include <sys/stat.h>
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

}  // namespace

ModelDirectory ModelDirectory::open(const fs::path& dir) {
  ModelDirectory d;
  d.path_ = dir;
  d.dir_ = UniqueFd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!d.dir_.valid()) {
    if (errno == ENOENT || errno == ENOTDIR) fail(dir, "not a model directory (no such directory)");
    fail(dir, std::string("cannot open the model directory: ") + std::strerror(errno));
  }
  return d;
}

UniqueFd ModelDirectory::open_file(std::string_view name) const {
  const fs::path shown = path_of(name);
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string_view::npos)
    fail(shown, "is not the name of a file inside the model directory");
  UniqueFd file(::openat(dir_.get(), std::string(name).c_str(), kOpenFlags));
  if (!file.valid()) {
    const int error = errno;
    if (error == ENOENT) return UniqueFd();
    if (error == ENXIO) fail(shown, "is not a regular file (a socket)");
    fail(shown, std::string("cannot open: ") + std::strerror(error));
  }
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
