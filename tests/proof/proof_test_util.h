// Helpers for the proof tests: scratch folders, running hearth-proof and hearth-worker as real
// processes, and finding leftover processes by a marker in their command line.
#pragma once

#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "ipc/child_process.h"
#include "ipc/client.h"
#include "ipc/errors.h"
#include "tests/support/paths.h"
#include "tests/support/temp_dir.h"

namespace hearth::proof::testing {

namespace fs = std::filesystem;
using json = nlohmann::json;

using TempDir = hearth::test::TempDir;

inline void write_file(const fs::path& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << content;
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

inline std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline json read_json(const fs::path& path) {
  return json::parse(read_file(path));
}

// The folder holding the hearth binaries: this test's own (they all land in build/bin).
inline fs::path bin_dir() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec && fs::exists(self.parent_path() / "hearth-proof")) return self.parent_path();
  return fs::path(HEARTH_BINARY_DIR) / "bin";
}

inline fs::path default_model() {
  return hearth::test::source_dir() / "models" / "hearth-tiny-fortunes";
}

struct CommandResult {
  ExitStatus status;
  std::string out, err;
  int exit_code() const { return status.signaled ? -1 : status.code; }
};

// Runs argv to completion (killing it after `limit`), capturing stdout and stderr.
inline CommandResult run_command(const std::vector<std::string>& argv, const fs::path& scratch,
                                 std::chrono::seconds limit = std::chrono::seconds(300)) {
  static int counter = 0;
  const std::string stem = "cmd" + std::to_string(++counter);
  const fs::path out = scratch / (stem + ".out"), err = scratch / (stem + ".err");
  ChildProcess child = ChildProcess::spawn(ChildProcess::Options(argv)
                                               .stdout_to(ChildProcess::Stream::file(out))
                                               .stderr_to(ChildProcess::Stream::file(err)));
  auto status = child.wait_until(std::chrono::steady_clock::now() + limit);
  if (!status) {
    child.kill_group();
    status = child.wait_until(std::chrono::steady_clock::time_point::max());
  }
  return {*status, read_file(out), read_file(err)};
}

// Starts `argv`, a hearth binary that listens on `socket`, its stdout and stderr in
// dir/<stem>.out and dir/<stem>.err; returns once the socket takes a connection. Throws if the
// process exits first (with its stderr) or does not listen within 30 s.
inline ChildProcess spawn_listening(const std::vector<std::string>& argv, const std::string& socket,
                                    const fs::path& dir, const std::string& stem) {
  using namespace std::chrono_literals;
  const std::string name = fs::path(argv.at(0)).filename().string();
  const fs::path err = dir / (stem + ".err");
  ChildProcess process =
      ChildProcess::spawn(ChildProcess::Options(argv)
                              .stdout_to(ChildProcess::Stream::file(dir / (stem + ".out")))
                              .stderr_to(ChildProcess::Stream::file(err)));
  for (int i = 0; i < 3000; ++i) {
    if (process.wait_until(std::chrono::steady_clock::now()))
      throw std::runtime_error(name + " exited: " + read_file(err));
    try {
      ipc::Client::connect(socket);
      return process;
    } catch (const ipc::IpcError&) {
      std::this_thread::sleep_for(10ms);
    }
  }
  throw std::runtime_error(name + " did not start listening within 30 s");
}

// Processes whose command line mentions `needle` (e.g. a test's scratch folder): after a run,
// none of its workers may be left behind.
inline std::vector<pid_t> processes_mentioning(const std::string& needle) {
  std::vector<pid_t> found;
  DIR* proc = ::opendir("/proc");
  if (!proc) return found;
  while (dirent* e = ::readdir(proc)) {
    const pid_t pid = pid_t(std::atoi(e->d_name));
    if (pid <= 0 || pid == ::getpid()) continue;
    std::string cmdline = read_file(fs::path("/proc") / e->d_name / "cmdline");
    for (char& c : cmdline)
      if (c == '\0') c = ' ';
    if (cmdline.find(needle) != std::string::npos) found.push_back(pid);
  }
  ::closedir(proc);
  return found;
}

// One token stream of a worker run directly, as the harness would run it.
struct DirectRun {
  std::vector<int32_t> tokens;
  std::vector<double> logprobs;
};

// `prompt_arg` is "--prompt=TEXT" or "--prompt-tokens=1,2,3".
inline DirectRun run_worker_directly(const fs::path& scratch, const fs::path& profile,
                                     const std::string& prompt_arg, int max_tokens) {
  const CommandResult r =
      run_command({(bin_dir() / "hearth-worker").string(), "--model", default_model().string(),
                   "--profile", profile.string(), "--format", "jsonl", "--max-tokens",
                   std::to_string(max_tokens), prompt_arg},
                  scratch);
  if (r.exit_code() != 0) throw std::runtime_error("hearth-worker failed: " + r.err);
  DirectRun run;
  std::istringstream lines(r.out);
  std::string line;
  while (std::getline(lines, line)) {
    const json event = json::parse(line);
    if (event.contains("token")) {
      run.tokens.push_back(event["token"].get<int32_t>());
      run.logprobs.push_back(event["logprob"].get<double>());
    }
  }
  return run;
}

}  // namespace hearth::proof::testing
