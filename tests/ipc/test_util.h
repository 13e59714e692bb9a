#pragma once

// Helpers shared by the ipc and broker tests: descriptor counting, and small files whose
// identity and contents a test can check after they crossed a socket (TempDir is tests/support's).

#include <dirent.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include "base/unique_fd.h"
#include "tests/support/temp_dir.h"

namespace hearth::test {

// Open descriptors of a process (this one by default), as listed in /proc.
inline int count_open_fds(pid_t pid = 0) {
  const std::string dir = pid == 0 ? "/proc/self/fd" : "/proc/" + std::to_string(pid) + "/fd";
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return -1;
  int n = 0;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(d);
  return pid == 0 ? n - 1 : n;  // not counting the directory stream itself
}

// Polls `done` until it holds or `limit` passes; the limit only keeps a broken test from hanging.
inline bool eventually(const std::function<bool()>& done,
                       std::chrono::milliseconds limit = std::chrono::seconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

inline std::pair<UniqueFd, UniqueFd> socket_pair() {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    throw std::runtime_error("socketpair failed");
  }
  return {UniqueFd(fds[0]), UniqueFd(fds[1])};
}

// An anonymous in-memory file holding `content`.
inline UniqueFd make_memfd(const std::string& content) {
  UniqueFd fd(::memfd_create("hearth-test", MFD_CLOEXEC));
  if (!fd ||
      ::write(fd.get(), content.data(), content.size()) != static_cast<ssize_t>(content.size())) {
    throw std::runtime_error("memfd_create/write failed");
  }
  return fd;
}

inline std::string read_all(int fd) {
  std::string out;
  char buffer[4096];
  for (off_t offset = 0;;) {
    const ssize_t n = ::pread(fd, buffer, sizeof(buffer), offset);
    if (n <= 0) break;
    out.append(buffer, static_cast<std::size_t>(n));
    offset += n;
  }
  return out;
}

// (device, inode): two descriptors with the same identity refer to the same file.
inline std::pair<dev_t, ino_t> identity(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return {0, 0};
  return {st.st_dev, st.st_ino};
}

}  // namespace hearth::test
