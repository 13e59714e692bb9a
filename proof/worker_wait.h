// Waits for a worker process under a deadline, watching the proof run's stop flag: a worker that
// outlives the deadline, or is running when the run is interrupted, is killed with its group.
// Also what a report keeps of a worker's stderr.
#pragma once

#include <chrono>
#include <string>

#include "ipc/child_process.h"

namespace hearth::proof {

struct WaitOutcome {
  ExitStatus exit;
  std::string error;  // why it was killed; empty when it ended by itself
};

WaitOutcome wait_for_worker(ChildProcess& child, std::chrono::steady_clock::time_point start,
                            std::chrono::milliseconds timeout);

// The last non-empty line of a worker's stderr: usually "hearth-worker: error: ...".
std::string failure_line(const std::string& stderr_text);
// The end of a worker's stderr, for the report.
std::string stderr_tail(const std::string& stderr_text);

// "600 s", "250 ms".
std::string describe_duration(std::chrono::milliseconds d);

}  // namespace hearth::proof
