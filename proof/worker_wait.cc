#include "proof/worker_wait.h"

#include <algorithm>

#include "proof/runner.h"

namespace hearth::proof {

namespace {

// How often a waiting runner looks at the stop flag.
constexpr auto kStopPoll = std::chrono::milliseconds(100);
constexpr size_t kStderrTailBytes = 4096;

}  // namespace

std::string failure_line(const std::string& text) {
  const size_t end = text.find_last_not_of("\r\n \t");
  if (end == std::string::npos) return {};
  const size_t newline = text.rfind('\n', end);
  const size_t start = newline == std::string::npos ? 0 : newline + 1;
  return text.substr(start, end - start + 1);
}

std::string stderr_tail(const std::string& text) {
  return text.size() <= kStderrTailBytes ? text : text.substr(text.size() - kStderrTailBytes);
}

std::string describe_duration(std::chrono::milliseconds d) {
  const auto ms = d.count();
  return ms % 1000 == 0 ? std::to_string(ms / 1000) + " s" : std::to_string(ms) + " ms";
}

WaitOutcome wait_for_worker(ChildProcess& child, std::chrono::steady_clock::time_point start,
                            std::chrono::milliseconds timeout) {
  const auto deadline = start + timeout;
  const auto forever = std::chrono::steady_clock::time_point::max();
  while (true) {
    if (stop_requested()) {
      child.kill_group();
      return {*child.wait_until(forever), "interrupted: the worker was killed"};
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      child.kill_group();
      return {*child.wait_until(forever),
              "timed out after " + describe_duration(timeout) + "; the worker was killed"};
    }
    if (auto exit = child.wait_until(std::min(deadline, now + kStopPoll))) return {*exit, {}};
  }
}

}  // namespace hearth::proof
