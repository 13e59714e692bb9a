#include "ipc/unix_socket.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <utility>

#include "ipc/errors.h"

namespace hearth::ipc {
namespace {

sockaddr_un make_address(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty()) throw IpcError("socket path is empty");
  if (path.size() >= sizeof(addr.sun_path)) {
    throw IpcError("socket path " + path + " is too long (" + std::to_string(path.size()) +
                   " bytes; at most " + std::to_string(sizeof(addr.sun_path) - 1) + ")");
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}

std::string octal(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof(text), "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

// Creates the socket's directory, or checks that an existing one is as private as required:
// the directory, not the socket file, is what stops other users from connecting.
void prepare_directory(const std::string& dir, mode_t mode) {
  if (::mkdir(dir.c_str(), mode) == 0) {
    // mkdir applies the umask; set exactly what was asked for.
    if (::chmod(dir.c_str(), mode) != 0) throw_errno("chmod " + dir, errno);
  } else if (errno != EEXIST) {
    throw_errno("cannot create socket directory " + dir, errno);
  }
  // lstat: a symbolic link would make the checks below describe its target, which whoever
  // can replace the link (its own directory's owner) may swap after they pass.
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) throw_errno("stat " + dir, errno);
  if (S_ISLNK(st.st_mode)) {
    std::error_code ec;
    const std::string target = std::filesystem::canonical(dir, ec).string();
    throw IpcError("socket directory " + dir + " is a symbolic link" +
                   (ec ? std::string() : " (to " + target + ")") + "; give the directory itself");
  }
  if (!S_ISDIR(st.st_mode)) throw IpcError("socket directory " + dir + " is not a directory");
  if (st.st_uid != ::geteuid()) {
    throw IpcError("socket directory " + dir + " belongs to uid " + std::to_string(st.st_uid) +
                   ", not to this server's uid " + std::to_string(::geteuid()));
  }
  if ((st.st_mode & 0777 & ~mode) != 0) {
    throw IpcError("socket directory " + dir + " has mode " + octal(st.st_mode) +
                   "; it may grant at most " + octal(mode) +
                   " (use a private directory, e.g. $XDG_RUNTIME_DIR/hearth)");
  }
}

// Takes PATH.lock so that two servers starting at once cannot both decide the socket is stale.
UniqueFd take_lock(const std::string& path) {
  const std::string lock_path = path + ".lock";
  UniqueFd lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!lock) throw_errno("cannot open lock file " + lock_path, errno);
  if (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      throw IpcError("another server is already running at " + path + " (it holds " + lock_path +
                     ")");
    }
    throw_errno("cannot lock " + lock_path, errno);
  }
  return lock;
}

// Removes a socket file left by a dead server; refuses if anything accepts connections on it.
void remove_stale_socket(const std::string& path, const sockaddr_un& addr) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return;
    throw_errno("stat " + path, errno);
  }
  if (!S_ISSOCK(st.st_mode)) {
    throw IpcError(path + " exists and is not a socket; refusing to replace it");
  }
  UniqueFd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!probe) throw_errno("socket", errno);
  int rc;
  do {
    rc = ::connect(probe.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  } while (rc != 0 && errno == EINTR);
  if (rc == 0 || errno == EAGAIN) {  // EAGAIN: a live server with a full backlog
    throw IpcError("a server is already listening at " + path + "; refusing to take its socket");
  }
  if (errno != ECONNREFUSED) throw_errno("cannot tell whether " + path + " is in use", errno);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    throw_errno("cannot remove stale socket " + path, errno);
  }
}

}  // namespace

UnixListener UnixListener::listen(const std::string& path, const ListenOptions& options) {
  const sockaddr_un addr = make_address(path);
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  prepare_directory(dir, options.directory_mode);

  UnixListener listener;
  listener.lock_ = take_lock(path);
  remove_stale_socket(path, addr);

  listener.fd_.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!listener.fd_) throw_errno("socket", errno);
  if (::bind(listener.fd_.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    throw_errno("cannot bind " + path, errno);
  }
  // From here on the file is ours; the destructor of `listener` removes it if we fail below.
  listener.path_ = path;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw_errno("stat " + path, errno);
  listener.dev_ = st.st_dev;
  listener.ino_ = st.st_ino;
  // bind() applied the umask. The private directory keeps everyone else out until the mode is
  // right, so chmod after bind is not a race.
  if (::chmod(path.c_str(), options.socket_mode) != 0) throw_errno("chmod " + path, errno);
  if (::listen(listener.fd_.get(), options.backlog) != 0) throw_errno("listen " + path, errno);
  return listener;
}

UnixListener::UnixListener(UnixListener&& other) noexcept
    : fd_(std::move(other.fd_)),
      lock_(std::move(other.lock_)),
      path_(std::exchange(other.path_, {})),
      dev_(other.dev_),
      ino_(other.ino_) {}

UnixListener& UnixListener::operator=(UnixListener&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = std::move(other.fd_);
    lock_ = std::move(other.lock_);
    path_ = std::exchange(other.path_, {});
    dev_ = other.dev_;
    ino_ = other.ino_;
  }
  return *this;
}

UnixListener::~UnixListener() {
  close();
}

UniqueFd UnixListener::accept() {
  for (;;) {
    UniqueFd client(::accept4(fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (client) return client;
    // ECONNABORTED: the peer gave up while queued; look at the next one.
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return {};
    throw_errno("accept on " + path_, errno);
  }
}

void UnixListener::close() noexcept {
  if (!path_.empty()) {
    struct stat st {};
    // Only remove the file we bound: a successor may already have replaced it.
    if (::lstat(path_.c_str(), &st) == 0 && st.st_dev == dev_ && st.st_ino == ino_) {
      ::unlink(path_.c_str());
    }
    path_.clear();
  }
  fd_.reset();
  lock_.reset();
}

UniqueFd connect_unix(const std::string& path) {
  const sockaddr_un addr = make_address(path);
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) throw_errno("socket", errno);
  int rc;
  do {
    rc = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  } while (rc != 0 && errno == EINTR);
  if (rc == 0 || errno == EISCONN) return fd;
  switch (errno) {
    case ENOENT:
      throw ServerNotRunning("hearth server not running at " + path + " (no socket file)");
    case ECONNREFUSED:
      throw ServerNotRunning("hearth server not running at " + path +
                             " (stale socket file: nobody is listening)");
    case EACCES:
      throw IpcError("permission denied connecting to " + path +
                     ": the socket or its directory does not admit uid " +
                     std::to_string(::geteuid()));
    default:
      throw_errno("cannot connect to " + path, errno);
  }
}

}  // namespace hearth::ipc
