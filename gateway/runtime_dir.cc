#include "gateway/runtime_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

namespace hearth::gateway {

namespace {

// Removes the entries of `dir` (sockets and logs; an empty subdirectory) and then `dir`, in
// one pass (the caller tries again if something was added meanwhile), with system calls only: the
// janitor is forked from a process that may have other threads, so it must not allocate.
bool remove_flat(const char* dir) {
  const int fd = ::open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT;
  alignas(8) char buffer[4096];
  for (;;) {
    const long n = ::syscall(SYS_getdents64, fd, buffer, sizeof buffer);
    if (n <= 0) break;
    for (long offset = 0; offset < n;) {
      const auto* entry = reinterpret_cast<const dirent64*>(buffer + offset);
      offset += entry->d_reclen;
      const char* name = entry->d_name;
      if (std::strcmp(name, ".") == 0 || std::strcmp(name, "..") == 0) continue;
      if (::unlinkat(fd, name, 0) != 0 && errno == EISDIR) ::unlinkat(fd, name, AT_REMOVEDIR);
    }
  }
  ::close(fd);
  return ::rmdir(dir) == 0 || errno == ENOENT;
}

[[noreturn]] void run_janitor(int wake, const char* dir) {
  // Its own process group and no terminal signals: a Ctrl-C or a kill of the gateway's group
  // must not take the janitor before it has cleaned up. Nothing of the gateway's stays open.
  ::setpgid(0, 0);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE}) ::signal(sig, SIG_IGN);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::prctl(PR_SET_NAME, "hearth-janitor");
  if (wake > 0) ::syscall(SYS_close_range, 0u, unsigned(wake - 1), 0u);
  ::syscall(SYS_close_range, unsigned(wake + 1), ~0u, 0u);
  char byte;
  while (::read(wake, &byte, 1) != 0 && errno == EINTR) {
  }
  // A child of the gateway that was still being killed may add a file as we go: try again.
  for (int attempt = 0; attempt < 100 && !remove_flat(dir); ++attempt) ::usleep(10'000);
  ::_exit(0);
}

}  // namespace

RuntimeDir::RuntimeDir(const std::filesystem::path& under) {
  std::string pattern = (under / "hearth-gateway-XXXXXX").string();
  if (!::mkdtemp(pattern.data()))
    throw std::runtime_error("cannot create a runtime directory under " + under.string() + ": " +
                             std::strerror(errno));
  path_ = pattern;  // mkdtemp makes it 0700
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    const int error = errno;
    ::rmdir(pattern.c_str());
    throw std::runtime_error(std::string("cannot start the runtime directory's janitor: pipe2: ") +
                             std::strerror(error));
  }
  UniqueFd wake(fds[0]);
  janitor_pipe_.reset(fds[1]);
  janitor_ = ::fork();
  if (janitor_ == 0) run_janitor(wake.get(), pattern.c_str());
  if (janitor_ < 0) {
    const int error = errno;
    ::rmdir(pattern.c_str());
    throw std::runtime_error(std::string("cannot start the runtime directory's janitor: fork: ") +
                             std::strerror(error));
  }
}

RuntimeDir::~RuntimeDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
  janitor_pipe_.reset();  // the janitor wakes, finds nothing left and exits
  while (::waitpid(janitor_, nullptr, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace hearth::gateway
