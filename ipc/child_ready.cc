#include "ipc/child_ready.h"

#include <algorithm>

namespace hearth {

ReadyWait wait_until_ready(ChildProcess& child, ChildProcess::Clock::time_point deadline,
                           std::chrono::milliseconds interval, const std::function<bool()>& ready) {
  using Clock = ChildProcess::Clock;
  for (;;) {
    if (ready()) return {ReadyWait::Outcome::kReady, {}};
    if (auto status = child.wait_until(std::min(deadline, Clock::now() + interval)))
      return {ReadyWait::Outcome::kExited, *status};
    if (Clock::now() >= deadline) return {ReadyWait::Outcome::kTimedOut, {}};
  }
}

}  // namespace hearth
