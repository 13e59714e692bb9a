#pragma once

// Running hearth-server and hearth-worker as real processes for the server tests: spawning
// with captured output, waiting for a server to accept, reading a worker's stream line by line
// (through a deliberately small pipe, so a worker that is not read stalls mid-generation), and
// reading a process's descriptors and memory from /proc.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "ipc/client.h"
#include "ipc/errors.h"
#include "tests/ipc/test_util.h"
#include "tests/support/paths.h"

extern char** environ;

namespace hearth::test {

using namespace std::chrono_literals;
using json = nlohmann::json;

// Only there so that a broken test fails instead of hanging.
inline constexpr std::chrono::milliseconds kPatience = 60s;

// Where hearth-server and hearth-worker are: beside this test binary (build/bin), unless
// HEARTH_BIN_DIR says otherwise (binaries copied to another machine).
inline std::string binary(const std::string& name) {
  if (const char* env = std::getenv("HEARTH_BIN_DIR")) return std::string(env) + "/" + name;
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path() / name).string();
}

inline std::filesystem::path tiny_model_dir() {
  return source_dir() / "models/hearth-tiny-fortunes";
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A child process. Its stdout goes to a pipe this side reads (small, when asked, so that the
// child blocks once it is a few lines ahead) or to a file; stderr always to a file. Killed
// with SIGKILL on destruction if still running.
class Process {
 public:
  struct Options {
    bool pipe_stdout = false;
    int pipe_bytes = 0;       // > 0: shrink the pipe to this (the kernel rounds up to a page)
    std::string stdout_file;  // when not piped ("" = /dev/null)
    std::string stderr_file;  // "" = /dev/null
  };

  Process(const std::vector<std::string>& args, const Options& options) {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    UniqueFd write_end;
    if (options.pipe_stdout) {
      int fds[2];
      if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
      stdout_.reset(fds[0]);
      write_end.reset(fds[1]);
      if (options.pipe_bytes > 0) ::fcntl(fds[0], F_SETPIPE_SZ, options.pipe_bytes);
      posix_spawn_file_actions_adddup2(&actions, write_end.get(), STDOUT_FILENO);
    } else {
      posix_spawn_file_actions_addopen(
          &actions, STDOUT_FILENO,
          options.stdout_file.empty() ? "/dev/null" : options.stdout_file.c_str(),
          O_WRONLY | O_CREAT | O_TRUNC, 0600);
    }
    posix_spawn_file_actions_addopen(
        &actions, STDERR_FILENO,
        options.stderr_file.empty() ? "/dev/null" : options.stderr_file.c_str(),
        O_WRONLY | O_CREAT | O_TRUNC, 0600);
    std::vector<std::string> storage = args;
    std::vector<char*> argv;
    for (std::string& a : storage) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int rc = ::posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0)
      throw std::runtime_error("posix_spawn " + args[0] + " failed: " + std::strerror(rc));
  }
  ~Process() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      wait();
    }
  }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0 && ::waitpid(pid_, nullptr, WNOHANG) == 0; }
  void signal(int signum) const { ::kill(pid_, signum); }

  // The next stdout line, or nullopt at EOF or after `limit`.
  std::optional<std::string> read_line(std::chrono::milliseconds limit = kPatience) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
      if (const size_t nl = buffer_.find('\n'); nl != std::string::npos) {
        std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return line;
      }
      if (eof_ || std::chrono::steady_clock::now() > deadline) return std::nullopt;
      pollfd p{stdout_.get(), POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      char chunk[4096];
      const ssize_t n = ::read(stdout_.get(), chunk, sizeof chunk);
      if (n <= 0)
        eof_ = true;
      else
        buffer_.append(chunk, size_t(n));
    }
  }
  // Everything left on stdout, up to EOF.
  std::string read_rest() {
    std::string out;
    while (auto line = read_line()) out += *line + "\n";
    out += buffer_;
    buffer_.clear();
    return out;
  }

  // Waits for the process to end; returns its wait status.
  int wait() {
    int status = 0;
    if (pid_ > 0) ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

 private:
  pid_t pid_ = -1;
  UniqueFd stdout_;
  std::string buffer_;
  bool eof_ = false;
};

inline bool exited_ok(int status) {
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

inline std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("signal ") + strsignal(WTERMSIG(status));
  return "status " + std::to_string(status);
}

inline ipc::Client connect_client(const std::string& socket, const std::string& name = "test") {
  ipc::ClientOptions options;
  options.name = name;
  options.timeout = kPatience;
  return ipc::Client::connect(socket, options);
}

// hearth-server in its own process, in a private temporary directory.
class ServerProcess {
 public:
  // `extra` follows --socket; by default the tiny model is served as "tiny" with memfd.
  explicit ServerProcess(std::vector<std::string> extra = {}, bool wait = true)
      : socket_(dir_ / "run/hearth.sock"), log_(dir_ / "server.log") {
    if (extra.empty())
      extra = {"--backend", "memfd", "--model", tiny_model_dir().string() + ":tiny"};
    std::vector<std::string> args = {binary("hearth-server"), "--socket", socket_};
    args.insert(args.end(), extra.begin(), extra.end());
    Process::Options options;
    options.stderr_file = log_;
    process_.emplace(args, options);
    if (wait) wait_ready();
  }

  // Waits until the server accepts a client; throws with its log if it dies first.
  void wait_ready() {
    const auto deadline = std::chrono::steady_clock::now() + kPatience;
    for (;;) {
      try {
        connect_client(socket_);
        return;
      } catch (const ipc::IpcError&) {
      }
      if (!process_->running() || std::chrono::steady_clock::now() > deadline)
        throw std::runtime_error("hearth-server did not start:\n" + log());
      std::this_thread::sleep_for(10ms);
    }
  }

  const std::string& socket() const { return socket_; }
  std::string log() const { return read_file(log_); }
  Process& process() { return *process_; }
  pid_t pid() const { return process_->pid(); }
  const TempDir& dir() const { return dir_; }

  json stats() { return connect_client(socket_, "stats").call(ipc::op::kStats).body; }

 private:
  TempDir dir_;
  std::string socket_;
  std::string log_;
  std::optional<Process> process_;
};

// What a run of hearth-worker (or another of hearth's binaries) produced.
struct WorkerRun {
  int status = 0;
  std::string out, err;
};

// Runs the binary `name` to completion with `args`, output in files under `dir`.
inline WorkerRun run_binary(const std::string& name, const TempDir& dir,
                            const std::vector<std::string>& args) {
  static int counter = 0;
  const std::string base = dir / (name + std::to_string(counter++));
  Process::Options options;
  options.stdout_file = base + ".out";
  options.stderr_file = base + ".err";
  std::vector<std::string> argv = {binary(name)};
  argv.insert(argv.end(), args.begin(), args.end());
  Process p(argv, options);
  WorkerRun run;
  run.status = p.wait();
  run.out = read_file(base + ".out");
  run.err = read_file(base + ".err");
  return run;
}

inline WorkerRun run_worker(const TempDir& dir, const std::vector<std::string>& args) {
  return run_binary("hearth-worker", dir, args);
}

// The generation arguments the tests share: a sampled continuation (so the seed matters) of a
// fixed prompt on the CPU engine, as jsonl.
inline std::vector<std::string> generation_args(int seed, int max_tokens, bool ignore_eos = false,
                                                const std::string& backend = "cpu") {
  std::vector<std::string> args = {"--prompt",      "A fortune for today:",
                                   "--backend",     backend,
                                   "--temperature", "0.9",
                                   "--top-k",       "40",
                                   "--seed",        std::to_string(seed),
                                   "--max-tokens",  std::to_string(max_tokens),
                                   "--format",      "jsonl"};
  if (ignore_eos) args.insert(args.end(), {"--set", "ignore_eos=true"});
  return args;
}

inline std::vector<std::string> concat(std::vector<std::string> a,
                                       const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The per-token lines of a jsonl stream, exactly as written, and its final event.
struct Stream {
  std::vector<std::string> tokens;
  json done;
};

inline Stream parse_stream(const std::string& out) {
  Stream s;
  std::stringstream ss(out);
  for (std::string line; std::getline(ss, line);) {
    const json event = json::parse(line, nullptr, false);
    if (event.is_object() && event.contains("token"))
      s.tokens.push_back(line);
    else if (event.is_object() && event.contains("done"))
      s.done = event;
  }
  return s;
}

inline int count_fds(pid_t pid) {
  return count_open_fds(pid);
}

inline long rss_kib(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

// Lines of /proc/PID/maps that map memfds: what a worker still holds of a server's weights.
inline int count_memfd_maps(pid_t pid = 0) {
  std::ifstream maps(pid == 0 ? "/proc/self/maps" : "/proc/" + std::to_string(pid) + "/maps");
  int n = 0;
  for (std::string line; std::getline(maps, line);)
    n += line.find("/memfd:hearth:") != std::string::npos;
  return n;
}

}  // namespace hearth::test
