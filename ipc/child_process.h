// A child process its parent owns: forked by the process's spawn thread into a process group
// of its own, its standard streams wired as asked (a file, a pipe the parent reads or writes,
// /dev/null, or the parent's own), no other descriptor of the parent's. Owning it means reaping
// it: the destructor kills the whole group and waits, so no child (nor anything a wrapper
// script started) outlives its owner, and none is left a zombie. A parent that dies without
// running destructors (SIGKILL, a crash) takes its children with it: each gets SIGKILL from
// the kernel when the parent process dies (PR_SET_PDEATHSIG; spawn_thread.h says why a thread).
// Used by the proof harness, the benchmarks and the tests, and by anything that starts workers.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/unique_fd.h"

namespace hearth {

// How a process ended: an exit code, or the signal that killed it.
struct ExitStatus {
  bool signaled = false;
  int code = 0;  // exit code, or signal number when signaled
  bool success() const { return !signaled && code == 0; }
  bool exited_with(int exit_code) const { return !signaled && code == exit_code; }
  std::string describe() const;  // "exit status 3", "killed by signal 9 (SIGKILL)"
};

// The read end of a child's stdout or stderr pipe, read a line at a time.
class PipeReader {
 public:
  using Clock = std::chrono::steady_clock;

  PipeReader() = default;
  explicit PipeReader(UniqueFd fd) : fd_(std::move(fd)) {}

  // The next line without its '\n'; nullopt at the end of the output or once `deadline` passes
  // (a last line without '\n' comes back at the end). Never blocks past `deadline`.
  std::optional<std::string> read_line(Clock::time_point deadline = Clock::time_point::max());
  // Everything up to the end of the output (or what came before `deadline`).
  std::string read_to_end(Clock::time_point deadline = Clock::time_point::max());
  bool at_end() const { return eof_ && buffer_.empty(); }
  int fd() const { return fd_.get(); }

 private:
  // Reads what is there (waiting at most until `deadline`); false at EOF or past the deadline.
  bool fill(Clock::time_point deadline);

  UniqueFd fd_;
  std::string buffer_;
  bool eof_ = false;
};

class ChildProcess {
 public:
  using Clock = std::chrono::steady_clock;

  // Where one of the child's standard streams goes (or, for stdin, comes from).
  struct Stream {
    enum class Kind { kNull, kFile, kPipe, kInherit, kDescriptor };
    Kind kind = Kind::kNull;
    std::filesystem::path path;  // kFile: created or truncated (stdout, stderr), read (stdin)
    int pipe_bytes = 0;          // kPipe: > 0 shrinks the pipe (the kernel rounds to a page)
    int fd = -1;                 // kDescriptor: the parent's open descriptor (e.g. a socket)

    static Stream null() { return {}; }
    static Stream file(std::filesystem::path p) { return {Kind::kFile, std::move(p), 0, -1}; }
    static Stream pipe(int bytes = 0) { return {Kind::kPipe, {}, bytes, -1}; }
    static Stream inherit() { return {Kind::kInherit, {}, 0, -1}; }
    // A descriptor of the parent's becomes the stream (a duplicate; the parent keeps its own):
    // a socketpair end as stdin gives the child a channel both ways.
    static Stream descriptor(int parent_fd) { return {Kind::kDescriptor, {}, 0, parent_fd}; }
  };

  // What to start and how to wire it, e.g.
  //   ChildProcess::Options({"hearth-worker", "--help"}).stdout_to(Stream::pipe())
  struct Options {
    explicit Options(std::vector<std::string> args) : argv(std::move(args)) {}
    Options& stdin_from(Stream s) {
      in = std::move(s);
      return *this;
    }
    Options& stdout_to(Stream s) {
      out = std::move(s);
      return *this;
    }
    Options& stderr_to(Stream s) {
      err = std::move(s);
      return *this;
    }
    Options& with_env(std::vector<std::string> entries) {
      env = std::move(entries);
      return *this;
    }

    std::vector<std::string> argv;  // argv[0] is the program; searched in PATH if it has no '/'
    Stream in, out, err;            // default: all /dev/null
    // "NAME=VALUE" entries set in the child's environment on top of (or instead of) the parent's.
    std::vector<std::string> env;
  };

  // Throws std::runtime_error naming the program (or the file) when it cannot be started.
  static ChildProcess spawn(const Options& options);

  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&&) = delete;
  ChildProcess(const ChildProcess&) = delete;
  ~ChildProcess();

  // Waits until the process exits or `deadline` passes. Returns its status once it has exited
  // (then and on every later call). Before reaping the leader it kills what is left of its group,
  // so a wrapper's children cannot keep running after the wrapper is gone.
  std::optional<ExitStatus> wait_until(Clock::time_point deadline);
  // Waits as long as it takes.
  ExitStatus wait() { return *wait_until(Clock::time_point::max()); }
  // Whether it has not exited yet (reaps it if it has).
  bool running() { return !wait_until(Clock::now()); }
  // SIGKILL to the whole group; then wait_until() reports the kill. No-op once reaped.
  void kill_group();
  // `signum` to the process itself (not its group). No-op once reaped.
  void signal(int signum);

  // The pipes, when Options asked for them (std::logic_error otherwise).
  PipeReader& stdout_pipe();
  PipeReader& stderr_pipe();
  // Writes all of `bytes` to the stdin pipe. Throws std::runtime_error if the child has closed
  // its end (never raises SIGPIPE in the parent).
  void write_stdin(std::string_view bytes);
  // Closes the stdin pipe: the child reads EOF.
  void close_stdin() { stdin_.reset(); }

  pid_t pid() const { return pid_; }

 private:
  explicit ChildProcess(pid_t pid);
  ExitStatus reap();

  pid_t pid_ = -1;
  UniqueFd pidfd_;  // readable once the process has exited; invalid where pidfd_open is missing
  std::optional<ExitStatus> status_;
  UniqueFd stdin_;
  std::optional<PipeReader> stdout_, stderr_;
};

}  // namespace hearth
