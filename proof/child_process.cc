#include "proof/child_process.h"

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
#include <stdexcept>
#include <thread>

extern char** environ;

namespace hearth::proof {

namespace {

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

int remaining_ms(std::chrono::steady_clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return int(std::clamp<long long>(left.count(), 0, 60'000));
}

}  // namespace

std::string ExitStatus::describe() const {
  if (!signaled && code < 0) return "unknown exit status (the process was reaped elsewhere)";
  if (!signaled) return "exit status " + std::to_string(code);
  const char* name = sigabbrev_np(code);
  return "killed by signal " + std::to_string(code) +
         (name ? " (SIG" + std::string(name) + ")" : "");
}

ChildProcess ChildProcess::spawn(const Options& options) {
  if (options.argv.empty()) throw std::runtime_error("spawn: no program given");
  SpawnSetup setup;
  const std::string program = options.argv[0];
  // Opened here rather than in the child, so a bad path is reported as such and not as a
  // failure to start the program.
  const UniqueFd in = open_file("/dev/null", O_RDONLY);
  const UniqueFd out = open_file(options.stdout_path, O_WRONLY | O_CREAT | O_TRUNC);
  const UniqueFd err = open_file(options.stderr_path, O_WRONLY | O_CREAT | O_TRUNC);
  check(posix_spawn_file_actions_adddup2(setup.actions(), in.get(), STDIN_FILENO),
        "posix_spawn_file_actions_adddup2");
  check(posix_spawn_file_actions_adddup2(setup.actions(), out.get(), STDOUT_FILENO),
        "posix_spawn_file_actions_adddup2");
  check(posix_spawn_file_actions_adddup2(setup.actions(), err.get(), STDERR_FILENO),
        "posix_spawn_file_actions_adddup2");
  // Other threads open files without O_CLOEXEC (std::ofstream); none of them belongs in a worker.
  check(posix_spawn_file_actions_addclosefrom_np(setup.actions(), 3),
        "posix_spawn_file_actions_addclosefrom_np");

  // Own process group (so a timeout can kill a wrapper and all it started); default signal
  // dispositions and an empty mask, whatever the harness itself blocks or ignores.
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

  std::vector<char*> argv;
  for (const std::string& a : options.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc =
      posix_spawnp(&pid, program.c_str(), setup.actions(), setup.attr(), argv.data(), environ);
  if (rc != 0) throw std::runtime_error("cannot start " + program + ": " + std::strerror(rc));
  return ChildProcess(pid);
}

ChildProcess::ChildProcess(pid_t pid) : pid_(pid) {
  // A pidfd lets wait_until sleep in poll() until the exit instead of polling waitpid.
  const long fd = ::syscall(SYS_pidfd_open, pid, 0);
  if (fd >= 0) pidfd_.reset(int(fd));
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      pidfd_(std::move(other.pidfd_)),
      status_(other.status_) {}

ChildProcess::~ChildProcess() {
  if (pid_ < 0 || status_) return;
  kill_group();
  reap();
}

void ChildProcess::kill_group() {
  // The group id stays reserved while the unreaped leader exists, so this cannot hit a stranger.
  if (pid_ >= 0 && !status_) ::kill(-pid_, SIGKILL);
}

std::optional<ExitStatus> ChildProcess::wait_until(std::chrono::steady_clock::time_point deadline) {
  if (status_) return status_;
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
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
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

}  // namespace hearth::proof
