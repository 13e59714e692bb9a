// SIGTERM and SIGINT for a serving worker: blocked in every thread, and waited for by one
// thread of their own, so the worker can end its requests with an error event before it stops
// (the broker's own handling would just close the connections).
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <thread>

namespace hearth {

// Blocks SIGTERM and SIGINT in the calling thread and the threads it starts from then on, so
// a StopSignalWatcher can wait for them. Call it first thing in main, before any thread exists.
void block_stop_signals();

// Calls `on_signal` with "SIGTERM" or "SIGINT" on a thread of its own each time one arrives,
// until destroyed. The signals must be blocked (block_stop_signals) in every thread.
class StopSignalWatcher {
 public:
  explicit StopSignalWatcher(std::function<void(const std::string&)> on_signal);
  ~StopSignalWatcher();
  StopSignalWatcher(const StopSignalWatcher&) = delete;
  StopSignalWatcher& operator=(const StopSignalWatcher&) = delete;

 private:
  void watch();

  std::function<void(const std::string&)> on_signal_;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

}  // namespace hearth
