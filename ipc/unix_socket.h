#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <string>

#include "base/unique_fd.h"

namespace hearth::ipc {

struct ListenOptions {
  mode_t socket_mode = 0600;  // the socket file; wider only if other uids are allowed in
  // The socket's directory is created with this mode; an existing one must be ours and grant no
  // more than this. It is what keeps other users away from the socket.
  mode_t directory_mode = 0700;
  int backlog = SOMAXCONN;
};

// A listening Unix stream socket bound to a path, and the lock (PATH.lock) that makes its owner
// the only server at that path. Closing or destroying it stops listening and removes the socket
// file unless someone has replaced it since. The lock file is left behind on purpose: removing
// it would let two servers lock different files for the same path.
class UnixListener {
 public:
  // Prepares the directory, takes the lock, replaces a stale socket file (nobody accepts on it)
  // and binds. Throws IpcError with a clear message if a live server holds the path, the
  // directory is unsafe, or the path is too long. Never removes a socket that accepts.
  static UnixListener listen(const std::string& path, const ListenOptions& options = {});

  UnixListener() = default;
  UnixListener(UnixListener&& other) noexcept;
  UnixListener& operator=(UnixListener&& other) noexcept;
  ~UnixListener();

  int fd() const { return fd_.get(); }
  const std::string& path() const { return path_; }
  bool listening() const { return fd_.valid(); }

  // One pending connection as a non-blocking, close-on-exec socket, or an empty UniqueFd when
  // none is pending. Throws IpcError on a real failure (e.g. out of descriptors).
  UniqueFd accept();

  // Stops listening, removes the socket file if it is still ours, releases the lock.
  void close() noexcept;

 private:
  UniqueFd fd_;
  UniqueFd lock_;
  std::string path_;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
};

// Connects to the socket at `path` (blocking, close-on-exec). Throws ServerNotRunning when there
// is no socket file or nobody listens on it, IpcError otherwise (e.g. permission denied).
UniqueFd connect_unix(const std::string& path);

}  // namespace hearth::ipc
