#include "worker/stop_signals.h"

#include <pthread.h>
#include <signal.h>

namespace hearth {

namespace {

sigset_t stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}

}  // namespace

void block_stop_signals() {
  const sigset_t set = stop_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

StopSignalWatcher::StopSignalWatcher(std::function<void(const std::string&)> on_signal)
    : on_signal_(std::move(on_signal)), thread_([this] { watch(); }) {}

StopSignalWatcher::~StopSignalWatcher() {
  done_ = true;
  thread_.join();
}

// A short timeout, so the destructor need not send a signal to end the wait.
void StopSignalWatcher::watch() {
  const sigset_t set = stop_signals();
  const timespec tick{0, 100'000'000};
  while (!done_) {
    const int sig = sigtimedwait(&set, nullptr, &tick);
    if (done_) return;
    if (sig == SIGTERM) on_signal_("SIGTERM");
    if (sig == SIGINT) on_signal_("SIGINT");
  }
}

}  // namespace hearth
