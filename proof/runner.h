// Runs every profile over every prompt (and each R times) as hearth-worker processes, up to K
// at a time, each under a deadline. A run that crashes, hangs, fails or writes a malformed
// stream is an error result for that run, never dropped: the caller sees one result per run.
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ipc/child_process.h"
#include "proof/profile_set.h"
#include "proof/suite.h"
#include "proof/worker_command.h"
#include "proof/worker_output.h"

namespace hearth::proof {

struct RunSpec {
  size_t prompt = 0;   // index into the suite
  size_t profile = 0;  // index into the profiles
  int repeat = 0;      // 0 .. repeat-1
};

struct RunResult {
  RunSpec spec;
  std::optional<Generation> generation;  // set exactly when the run succeeded
  std::string error;                     // why it failed, in one line; empty on success
  std::optional<ExitStatus> exit;        // unset if the worker never started
  double wall_ms = 0;
  std::filesystem::path stdout_path, stderr_path;
  std::string stderr_tail;  // the end of the worker's stderr, for the report
  bool ok() const { return generation.has_value(); }
};

struct RunnerOptions {
  std::filesystem::path worker;  // the hearth-worker binary (or a wrapper with its interface)
  ModelSource model;
  int concurrency = 1;
  int repeat = 1;
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};  // per run
  std::optional<int> budget;
  std::filesystem::path runs_dir;  // each run's stdout and stderr are kept here
  std::function<void(const RunResult&, size_t done, size_t total)>
      on_result;  // progress; serialized
};

// Results in RunSpec order (prompt, then profile, then repeat), whatever order the runs took.
std::vector<RunResult> run_all(const Suite& suite, const std::vector<ProofProfile>& profiles,
                               const RunnerOptions& options);

// Asks run_all to stop: runs in flight are killed and reported, runs not started are reported
// as not run. Async-signal-safe, for a SIGINT/SIGTERM handler.
void request_stop() noexcept;
bool stop_requested() noexcept;

}  // namespace hearth::proof
