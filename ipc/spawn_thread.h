// The one thread of a process that starts its children. A child's parent-death signal
// (PR_SET_PDEATHSIG) fires when the *thread* that forked it exits, not the process: a worker
// started from an HTTP handler thread or a proof task would be killed when that thread ends.
// Forking from a thread that lives as long as the process ties every child to the process.
#pragma once

#include <functional>

namespace hearth {

class SpawnThread {
 public:
  // The process's spawn thread, started on first use and never stopped (it must outlive
  // every caller, also while the process exits). A child forked without exec gets its own.
  static SpawnThread& instance();

  // Runs `job` on the spawn thread and returns once it has run. Exceptions must not escape
  // `job` (catch them in it and rethrow on the caller's side).
  void run(const std::function<void()>& job);

 private:
  SpawnThread();
  struct State;
  State* state_;  // never freed, like the thread that uses it
};

}  // namespace hearth
