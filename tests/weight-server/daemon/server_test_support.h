#pragma once

// Running hearth-server and hearth-worker as real processes for the server tests: spawning
// with captured output, waiting for a server to accept, reading a worker's stream line by line
// (through a deliberately small pipe, so a worker that is not read stalls mid-generation), and
// reading a process's descriptors and memory from /proc.

#include <signal.h>
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

#include "ipc/child_process.h"
#include "ipc/client.h"
#include "ipc/errors.h"
#include "tests/ipc/test_util.h"
#include "tests/support/paths.h"

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

inline std::chrono::steady_clock::time_point patience_deadline() {
  return std::chrono::steady_clock::now() + kPatience;
}

// A worker (or another binary) whose stdout the test reads through a deliberately small pipe,
// so that a worker nobody reads blocks once it is a few lines ahead; stderr to `stderr_file`.
inline ChildProcess start_piped(const std::vector<std::string>& argv,
                                const std::string& stderr_file = "") {
  using Stream = ChildProcess::Stream;
  return ChildProcess::spawn(
      ChildProcess::Options(argv)
          .stdout_to(Stream::pipe(4096))
          .stderr_to(stderr_file.empty() ? Stream::null() : Stream::file(stderr_file)));
}

// The next line of a piped stdout, or nullopt at its end (or when the test ran out of patience).
inline std::optional<std::string> next_line(ChildProcess& p) {
  return p.stdout_pipe().read_line(patience_deadline());
}

// Everything left on a piped stdout, up to its end, however long the child takes while it
// keeps writing (patience runs per line).
inline std::string rest_of_output(ChildProcess& p) {
  std::string out;
  while (auto line = p.stdout_pipe().read_line(patience_deadline())) out += *line + "\n";
  return out;
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
    process_.emplace(ChildProcess::spawn(
        ChildProcess::Options(args).stderr_to(ChildProcess::Stream::file(log_))));
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
  ChildProcess& process() { return *process_; }
  pid_t pid() const { return process_->pid(); }
  const TempDir& dir() const { return dir_; }

  json stats() { return connect_client(socket_, "stats").call(ipc::op::kStats).body; }

 private:
  TempDir dir_;
  std::string socket_;
  std::string log_;
  std::optional<ChildProcess> process_;
};

// What a run of hearth-worker (or another of hearth's binaries) produced.
struct WorkerRun {
  ExitStatus status;
  std::string out, err;
};

// Runs the binary `name` to completion with `args`, output in files under `dir`.
inline WorkerRun run_binary(const std::string& name, const TempDir& dir,
                            const std::vector<std::string>& args) {
  static int counter = 0;
  const std::string base = dir / (name + std::to_string(counter++));
  std::vector<std::string> argv = {binary(name)};
  argv.insert(argv.end(), args.begin(), args.end());
  ChildProcess p = ChildProcess::spawn(ChildProcess::Options(argv)
                                           .stdout_to(ChildProcess::Stream::file(base + ".out"))
                                           .stderr_to(ChildProcess::Stream::file(base + ".err")));
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
