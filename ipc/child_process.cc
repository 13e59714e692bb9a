#include "ipc/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <exception>
#include <stdexcept>
#include <thread>
#include <utility>

#include "ipc/spawn_thread.h"

extern char** environ;

namespace hearth {

namespace {

using Clock = std::chrono::steady_clock;

UniqueFd open_file(const std::filesystem::path& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error(path.string() + ": cannot open: " + std::strerror(errno));
  return UniqueFd(fd);
}

int remaining_ms(Clock::time_point deadline) {
  if (deadline == Clock::time_point::max()) return 60'000;
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return int(std::clamp<long long>(left, 0, 60'000));
}

// The child's end of one standard stream, opened here rather than in the child, so a bad path
// is reported as such and not as a failure to start the program. `parent` receives our end of
// a pipe. Returns an invalid descriptor for an inherited stream.
UniqueFd child_end(const ChildProcess::Stream& stream, bool is_input, UniqueFd& parent) {
  using Kind = ChildProcess::Stream::Kind;
  switch (stream.kind) {
    case Kind::kInherit:
      return {};
    case Kind::kDescriptor: {
      const int fd = ::fcntl(stream.fd, F_DUPFD_CLOEXEC, 3);
      if (fd < 0)
        throw std::runtime_error(std::string("spawn: cannot duplicate descriptor ") +
                                 std::to_string(stream.fd) + ": " + std::strerror(errno));
      return UniqueFd(fd);
    }
    case Kind::kNull:
      return open_file("/dev/null", is_input ? O_RDONLY : O_WRONLY);
    case Kind::kFile:
      return open_file(stream.path, is_input ? O_RDONLY : O_WRONLY | O_CREAT | O_TRUNC);
    case Kind::kPipe: {
      int fds[2];
      if (::pipe2(fds, O_CLOEXEC) != 0)
        throw std::runtime_error(std::string("pipe2: ") + std::strerror(errno));
      UniqueFd read_end(fds[0]), write_end(fds[1]);
      if (stream.pipe_bytes > 0) ::fcntl(fds[0], F_SETPIPE_SZ, stream.pipe_bytes);
      parent = is_input ? std::move(write_end) : std::move(read_end);
      return is_input ? std::move(read_end) : std::move(write_end);
    }
  }
  throw std::logic_error("unknown stream kind");
}

// The parent's environment with `overrides` ("NAME=VALUE") replacing entries of the same name.
std::vector<std::string> child_environment(const std::vector<std::string>& overrides) {
  auto name_of = [](std::string_view entry) { return entry.substr(0, entry.find('=')); };
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const std::string_view entry(*e);
    const bool replaced = std::any_of(overrides.begin(), overrides.end(),
                                      [&](const auto& o) { return name_of(o) == name_of(entry); });
    if (!replaced) env.emplace_back(entry);
  }
  for (const std::string& o : overrides) {
    if (o.find('=') == std::string::npos || o.front() == '=')
      throw std::runtime_error("spawn: environment entry '" + o + "' is not NAME=VALUE");
    env.push_back(o);
  }
  return env;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// What a forked child does before exec, prepared by the parent: the child may only make
// system calls (another thread may hold the allocator's lock at the fork).
struct ForkPlan {
  std::string path;  // resolved: no PATH search in the child
  std::vector<std::string> args, env;
  std::vector<char*> argv, envp;
  std::pair<int, int> wiring[3];  // {the child's end (or -1: inherit), the stream it becomes}
};

// Why a child could not exec: the step and its errno, sent up a close-on-exec pipe.
struct ForkFailure {
  int step;
  int error;
};
constexpr const char* kForkSteps[] = {
    "prctl(PR_SET_PDEATHSIG)", "setpgid", "dup2", "fcntl", "close_range", "sigprocmask", ""};

[[noreturn]] void child_fail(int report, int step) {
  const ForkFailure f{step, errno};
  [[maybe_unused]] const ssize_t n = ::write(report, &f, sizeof f);
  ::_exit(127);
}

// The child between fork and exec: system calls only.
[[noreturn]] void exec_child(const ForkPlan& plan, pid_t parent, int report) {
  // Dies with its parent (the spawn thread, which lives as long as the parent process). If the
  // parent died before this took effect, we were already re-parented: exit now.
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) child_fail(report, 0);
  if (::getppid() != parent) ::_exit(127);
  // Own process group, so a timeout can kill a wrapper and all it started.
  if (::setpgid(0, 0) != 0) child_fail(report, 1);
  for (const auto& [fd, target] : plan.wiring) {
    if (fd < 0) continue;
    if (fd == target) {
      if (::fcntl(fd, F_SETFD, 0) != 0) child_fail(report, 3);
    } else if (::dup2(fd, target) < 0) {
      child_fail(report, 2);
    }
  }
  // Other threads open files without O_CLOEXEC (std::ofstream); none of them belongs in a
  // child. `report` is close-on-exec and needed until then.
  if (report > 3 && ::syscall(SYS_close_range, 3u, unsigned(report - 1), 0u) != 0)
    child_fail(report, 4);
  if (::syscall(SYS_close_range, unsigned(report + 1), ~0u, 0u) != 0) child_fail(report, 4);
  // Default dispositions for what the parent handles (a handler must not run in the child
  // before exec) and for the signals it may ignore; then an empty mask.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) != 0) continue;
    const bool handled =
        (old.sa_flags & SA_SIGINFO) || (old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN);
    const bool reset =
        sig == SIGINT || sig == SIGTERM || sig == SIGPIPE || sig == SIGHUP || sig == SIGQUIT;
    if (handled || reset) ::sigaction(sig, &dfl, nullptr);
  }
  sigset_t none;
  sigemptyset(&none);
  if (::sigprocmask(SIG_SETMASK, &none, nullptr) != 0) child_fail(report, 5);
  ::execve(plan.path.c_str(), plan.argv.data(), plan.envp.data());
  child_fail(report, 6);
}

// Forks and execs `plan` (on the spawn thread); the pid, or throws naming the program.
pid_t fork_exec(const ForkPlan& plan) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    throw std::runtime_error(std::string("pipe2: ") + std::strerror(errno));
  UniqueFd report_read(fds[0]), report_write(fds[1]);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0)
    throw std::runtime_error("cannot start " + plan.args[0] + ": fork: " + std::strerror(errno));
  if (pid == 0) exec_child(plan, parent, report_write.get());
  report_write.reset();
  // EOF: the exec happened (the pipe closed on exec); a ForkFailure: it did not.
  ForkFailure failure{};
  ssize_t n;
  do {
    n = ::read(report_read.get(), &failure, sizeof failure);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) return pid;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const std::string step = kForkSteps[failure.step];
  throw std::runtime_error("cannot start " + plan.args[0] + ": " +
                           (step.empty() ? "" : step + ": ") + std::strerror(failure.error));
}

// `program` as posix_spawnp would find it: as given when it has a '/', else the first
// executable file of that name in $PATH.
std::string resolve_program(const std::string& program) {
  if (program.find('/') != std::string::npos) return program;
  const char* env = std::getenv("PATH");
  const std::string_view path = env ? env : "/usr/local/bin:/usr/bin:/bin";
  int error = ENOENT;
  for (size_t begin = 0; begin <= path.size();) {
    const size_t end = std::min(path.find(':', begin), path.size());
    const std::string dir(path.substr(begin, end - begin));
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      if (::access(candidate.c_str(), X_OK) == 0) return candidate;
      error = EACCES;
    }
    begin = end + 1;
  }
  throw std::runtime_error("cannot start " + program + ": " + std::strerror(error));
}

}  // namespace

std::string ExitStatus::describe() const {
  if (!signaled && code < 0) return "unknown exit status (the process was reaped elsewhere)";
  if (!signaled) return "exit status " + std::to_string(code);
  const char* name = sigabbrev_np(code);
  return "killed by signal " + std::to_string(code) +
         (name ? " (SIG" + std::string(name) + ")" : "");
}

bool PipeReader::fill(Clock::time_point deadline) {
  while (!eof_) {
    pollfd p{fd_.get(), POLLIN, 0};
    const int rc = ::poll(&p, 1, remaining_ms(deadline));
    if (rc < 0 && errno != EINTR)
      throw std::runtime_error(std::string("poll: ") + std::strerror(errno));
    if (rc > 0) {
      char chunk[4096];
      const ssize_t n = ::read(fd_.get(), chunk, sizeof chunk);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) {
        eof_ = true;
        return false;
      }
      buffer_.append(chunk, size_t(n));
      return true;
    }
    if (Clock::now() >= deadline) return false;
  }
  return false;
}

std::optional<std::string> PipeReader::read_line(Clock::time_point deadline) {
  if (!fd_) throw std::logic_error("PipeReader: no pipe");
  for (;;) {
    if (const size_t nl = buffer_.find('\n'); nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return line;
    }
    if (!fill(deadline)) {
      if (!eof_ || buffer_.empty()) return std::nullopt;
      return std::exchange(buffer_, {});
    }
  }
}

std::string PipeReader::read_to_end(Clock::time_point deadline) {
  if (!fd_) throw std::logic_error("PipeReader: no pipe");
  while (fill(deadline)) {
  }
  return std::exchange(buffer_, {});
}

ChildProcess ChildProcess::spawn(const Options& options) {
  if (options.argv.empty()) throw std::runtime_error("spawn: no program given");
  UniqueFd parent_in, parent_out, parent_err;
  const UniqueFd in = child_end(options.in, /*is_input=*/true, parent_in);
  const UniqueFd out = child_end(options.out, false, parent_out);
  const UniqueFd err = child_end(options.err, false, parent_err);

  ForkPlan plan;
  plan.path = resolve_program(options.argv[0]);
  plan.args = options.argv;
  plan.env = child_environment(options.env);
  plan.argv = pointers(plan.args);
  plan.envp = pointers(plan.env);
  plan.wiring[0] = {in ? in.get() : -1, STDIN_FILENO};
  plan.wiring[1] = {out ? out.get() : -1, STDOUT_FILENO};
  plan.wiring[2] = {err ? err.get() : -1, STDERR_FILENO};

  // Forked by the spawn thread, so the child's parent-death signal means the death of this
  // process, not of whichever thread asked (spawn_thread.h).
  pid_t pid = -1;
  std::exception_ptr failure;
  SpawnThread::instance().run([&] {
    try {
      pid = fork_exec(plan);
    } catch (...) {
      failure = std::current_exception();
    }
  });
  if (failure) std::rethrow_exception(failure);
  ChildProcess child(pid);
  child.stdin_ = std::move(parent_in);
  if (parent_out) child.stdout_.emplace(std::move(parent_out));
  if (parent_err) child.stderr_.emplace(std::move(parent_err));
  return child;
}

ChildProcess::ChildProcess(pid_t pid) : pid_(pid) {
  // A pidfd lets wait_until sleep in poll() until the exit instead of polling waitpid.
  const long fd = ::syscall(SYS_pidfd_open, pid, 0);
  if (fd >= 0) pidfd_.reset(int(fd));
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      pidfd_(std::move(other.pidfd_)),
      status_(other.status_),
      stdin_(std::move(other.stdin_)),
      stdout_(std::move(other.stdout_)),
      stderr_(std::move(other.stderr_)) {}

ChildProcess::~ChildProcess() {
  if (pid_ < 0 || status_) return;
  kill_group();
  reap();
}

void ChildProcess::kill_group() {
  // The group id stays reserved while the unreaped leader exists, so this cannot hit a stranger.
  if (pid_ >= 0 && !status_) ::kill(-pid_, SIGKILL);
}

void ChildProcess::signal(int signum) {
  if (pid_ >= 0 && !status_) ::kill(pid_, signum);
}

PipeReader& ChildProcess::stdout_pipe() {
  if (!stdout_) throw std::logic_error("the child's stdout is not a pipe");
  return *stdout_;
}

PipeReader& ChildProcess::stderr_pipe() {
  if (!stderr_) throw std::logic_error("the child's stderr is not a pipe");
  return *stderr_;
}

void ChildProcess::write_stdin(std::string_view bytes) {
  if (!stdin_) throw std::logic_error("the child's stdin is not an open pipe");
  // SIGPIPE blocked for this thread while writing, and a pending one consumed afterwards, so a
  // child that stopped reading is an error here rather than the death of the parent.
  sigset_t pipe_only, old;
  sigemptyset(&pipe_only);
  sigaddset(&pipe_only, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_only, &old);
  int error = 0;
  while (!bytes.empty() && error == 0) {
    const ssize_t n = ::write(stdin_.get(), bytes.data(), bytes.size());
    if (n > 0)
      bytes.remove_prefix(size_t(n));
    else if (errno != EINTR)
      error = errno;
  }
  if (error == EPIPE && !sigismember(&old, SIGPIPE)) {
    const timespec now{0, 0};
    while (sigtimedwait(&pipe_only, nullptr, &now) < 0 && errno == EINTR) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (error != 0)
    throw std::runtime_error("writing to the stdin of pid " + std::to_string(pid_) + ": " +
                             std::strerror(error));
}

std::optional<ExitStatus> ChildProcess::wait_until(Clock::time_point deadline) {
  if (status_) return status_;
  if (pid_ < 0) throw std::logic_error("ChildProcess: waiting on a moved-from process");
  for (;;) {
    if (pidfd_) {
      pollfd p{pidfd_.get(), POLLIN, 0};
      const int rc = ::poll(&p, 1, remaining_ms(deadline));
      if (rc < 0 && errno != EINTR)
        throw std::runtime_error(std::string("poll: ") + std::strerror(errno));
      if (rc > 0) return reap();
    } else {
      siginfo_t info{};
      // WNOWAIT: look without reaping, so the group can still be cleaned up first.
      if (::waitid(P_PID, id_t(pid_), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
          info.si_pid == pid_)
        return reap();
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min(5, remaining_ms(deadline))));
    }
    if (Clock::now() >= deadline) return std::nullopt;
  }
}

ExitStatus ChildProcess::reap() {
  ::kill(-pid_, SIGKILL);  // stragglers of the group; the leader has exited or is being killed
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(pid_, &status, 0);
  } while (r < 0 && errno == EINTR);
  ExitStatus s;
  if (r < 0) {
    s.signaled = false;
    s.code = -1;
  } else if (WIFSIGNALED(status)) {
    s.signaled = true;
    s.code = WTERMSIG(status);
  } else {
    s.code = WEXITSTATUS(status);
  }
  status_ = s;
  pidfd_.reset();
  return s;
}

}  // namespace hearth
