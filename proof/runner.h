// Runs every profile over every prompt (and each R times) as hearth-worker processes, up to K
// at a time, each under a deadline; or, batched, every run as one request of a worker that runs
// them all at once (proof/batched_runner.h). A run that crashes, hangs, fails or writes a malformed
// stream is an error result for that run, never dropped: the caller sees one result per run.
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ipc/child_process.h"
#include "proof/batched_plan.h"
#include "proof/profile_set.h"
#include "proof/run_files.h"
#include "proof/suite.h"
#include "proof/worker_command.h"
#include "proof/worker_output.h"

namespace hearth::proof {

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
  int concurrency = 1;  // alone: workers at once; unused when batched
  int repeat = 1;
  // Every run a request of one `hearth-worker --requests` (one per set of engine options).
  bool batched = false;
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};  // per worker
  std::optional<int> budget;
  std::filesystem::path runs_dir;  // each run's stdout and stderr are kept here
  std::function<void(const RunResult&, size_t done, size_t total)>
      on_result;  // progress; serialized
  // Batched: called as worker `index` of `workers` starts with `requests` requests.
  std::function<void(size_t index, const std::vector<BatchedWorker>& workers, size_t requests)>
      on_worker;
};

// Every run, in RunSpec order: prompt, then profile, then repeat.
std::vector<RunSpec> all_runs(const Suite& suite, const std::vector<ProofProfile>& profiles,
                              int repeat);

// Results in RunSpec order (prompt, then profile, then repeat), whatever order the runs took.
std::vector<RunResult> run_all(const Suite& suite, const std::vector<ProofProfile>& profiles,
                               const RunnerOptions& options);

// Asks run_all to stop: runs in flight are killed and reported, runs not started are reported
// as not run. Async-signal-safe, for a SIGINT/SIGTERM handler.
void request_stop() noexcept;
bool stop_requested() noexcept;

}  // namespace hearth::proof
