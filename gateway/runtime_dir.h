// The gateway's private directory for its weight server's and workers' sockets and logs:
// made 0700 under a given parent, removed when the gateway ends, however it ends.
//
// A normal exit removes it in the destructor. For a death that runs no destructor (SIGKILL, a
// crash) a janitor process, forked when the directory is made, waits on a pipe whose only
// write end the gateway holds: the kernel closes it when the gateway dies, and the janitor
// removes the directory then. That cleans up at the moment of death; sweeping directories of
// dead owners from the next gateway's start would leave them until another gateway runs under
// the same parent, perhaps never. (The server and workers themselves die with the gateway:
// ChildProcess gives them a parent-death signal.)
#pragma once

#include <sys/types.h>

#include <filesystem>

#include "base/unique_fd.h"

namespace hearth::gateway {

class RuntimeDir {
 public:
  // Creates hearth-gateway-XXXXXX under `under` and its janitor. Throws std::runtime_error
  // naming the parent directory when either cannot be made.
  explicit RuntimeDir(const std::filesystem::path& under);
  ~RuntimeDir();
  RuntimeDir(const RuntimeDir&) = delete;
  RuntimeDir& operator=(const RuntimeDir&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  UniqueFd janitor_pipe_;  // the write end: closed, by us or by our death, wakes the janitor
  pid_t janitor_ = -1;
};

}  // namespace hearth::gateway
