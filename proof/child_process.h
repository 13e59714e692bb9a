// A child process the harness owns: started with posix_spawn in a process group of its own,
// stdin from /dev/null, stdout and stderr written to files. Owning it means reaping it: the
// destructor kills the whole group and waits, so no worker (nor anything a wrapper script
// started) outlives its run, and none is left a zombie.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "ipc/unique_fd.h"

namespace hearth::proof {

// How a process ended: an exit code, or the signal that killed it.
struct ExitStatus {
  bool signaled = false;
  int code = 0;  // exit code, or signal number when signaled
  bool success() const { return !signaled && code == 0; }
  std::string describe() const;  // "exit status 3", "killed by signal 9 (SIGKILL)"
};

class ChildProcess {
 public:
  struct Options {
    std::vector<std::string> argv;  // argv[0] is the program; searched in PATH if it has no '/'
    std::filesystem::path stdout_path, stderr_path;  // created or truncated
  };
  // Throws std::runtime_error naming the program when it cannot be started.
  static ChildProcess spawn(const Options& options);

  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&&) = delete;
  ChildProcess(const ChildProcess&) = delete;
  ~ChildProcess();

  // Waits until the process exits or `deadline` passes. Returns its status once it has exited
  // (then and on every later call). Before reaping the leader it kills what is left of its group,
  // so a wrapper's children cannot keep running after the wrapper is gone.
  std::optional<ExitStatus> wait_until(std::chrono::steady_clock::time_point deadline);
  // SIGKILL to the whole group; then wait_until() reports the kill. No-op once reaped.
  void kill_group();

  pid_t pid() const { return pid_; }

 private:
  explicit ChildProcess(pid_t pid);
  ExitStatus reap();

  pid_t pid_ = -1;
  UniqueFd pidfd_;  // readable once the process has exited; invalid where pidfd_open is missing
  std::optional<ExitStatus> status_;
};

}  // namespace hearth::proof
