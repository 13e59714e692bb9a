// Waiting for a child just started to become ready (accept connections, answer hello): the one
// poll loop of everything that supervises processes (the gateway's worker pool and its weight
// server). A child that exits first failed to start; one not ready by the deadline is left
// running, for the caller to kill or keep.
#pragma once

#include <chrono>
#include <functional>

#include "ipc/child_process.h"

namespace hearth {

struct ReadyWait {
  enum class Outcome { kReady, kExited, kTimedOut };
  Outcome outcome = Outcome::kTimedOut;
  ExitStatus status;  // kExited: how the child ended
};

// Calls `ready` until it returns true, the child exits, or `deadline` passes. Between tries it
// waits on the child's exit for up to `interval`, so an exit ends the wait at once. An exception
// from `ready` propagates (the child is left running).
ReadyWait wait_until_ready(ChildProcess& child, ChildProcess::Clock::time_point deadline,
                           std::chrono::milliseconds interval, const std::function<bool()>& ready);

}  // namespace hearth
