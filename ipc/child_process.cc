#include "ipc/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <stdexcept>
#include <thread>
#include <utility>

extern char** environ;

namespace hearth {

namespace {

using Clock = std::chrono::steady_clock;

// posix_spawn's attribute and file-action objects, destroyed on every path.
class SpawnSetup {
 public:
  SpawnSetup() {
    posix_spawnattr_init(&attr_);
    posix_spawn_file_actions_init(&actions_);
  }
  ~SpawnSetup() {
    posix_spawn_file_actions_destroy(&actions_);
    posix_spawnattr_destroy(&attr_);
  }
  SpawnSetup(const SpawnSetup&) = delete;
  SpawnSetup& operator=(const SpawnSetup&) = delete;
  posix_spawnattr_t* attr() { return &attr_; }
  posix_spawn_file_actions_t* actions() { return &actions_; }

 private:
  posix_spawnattr_t attr_;
  posix_spawn_file_actions_t actions_;
};

void check(int rc, const char* what) {
  if (rc != 0) throw std::runtime_error(std::string(what) + ": " + std::strerror(rc));
}

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
  SpawnSetup setup;
  const std::string program = options.argv[0];
  UniqueFd parent_in, parent_out, parent_err;
  const UniqueFd in = child_end(options.in, /*is_input=*/true, parent_in);
  const UniqueFd out = child_end(options.out, false, parent_out);
  const UniqueFd err = child_end(options.err, false, parent_err);
  const std::pair<const UniqueFd*, int> wiring[] = {
      {&in, STDIN_FILENO}, {&out, STDOUT_FILENO}, {&err, STDERR_FILENO}};
  for (const auto& [fd, target] : wiring) {
    if (*fd)
      check(posix_spawn_file_actions_adddup2(setup.actions(), fd->get(), target),
            "posix_spawn_file_actions_adddup2");
  }
  // Other threads open files without O_CLOEXEC (std::ofstream); none of them belongs in a child.
  check(posix_spawn_file_actions_addclosefrom_np(setup.actions(), 3),
        "posix_spawn_file_actions_addclosefrom_np");

  // Own process group (so a timeout can kill a wrapper and all it started); default signal
  // dispositions and an empty mask, whatever the parent itself blocks or ignores.
  check(posix_spawnattr_setpgroup(setup.attr(), 0), "posix_spawnattr_setpgroup");
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int sig : {SIGINT, SIGTERM, SIGPIPE, SIGHUP, SIGQUIT}) sigaddset(&defaults, sig);
  check(posix_spawnattr_setsigmask(setup.attr(), &none), "posix_spawnattr_setsigmask");
  check(posix_spawnattr_setsigdefault(setup.attr(), &defaults), "posix_spawnattr_setsigdefault");
  check(posix_spawnattr_setflags(
            setup.attr(), POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF),
        "posix_spawnattr_setflags");

  std::vector<std::string> args = options.argv;
  std::vector<std::string> env = child_environment(options.env);
  std::vector<char*> argv = pointers(args), envp = pointers(env);
  pid_t pid = -1;
  const int rc =
      posix_spawnp(&pid, program.c_str(), setup.actions(), setup.attr(), argv.data(), envp.data());
  if (rc != 0) throw std::runtime_error("cannot start " + program + ": " + std::strerror(rc));
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
