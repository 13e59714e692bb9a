#include "ipc/spawn_thread.h"

#include <pthread.h>
#include <signal.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

namespace hearth {

namespace {

// A plain pthread mutex, so a forked child can reset it (pthread_atfork below).
pthread_mutex_t g_instance_mutex = PTHREAD_MUTEX_INITIALIZER;
SpawnThread* g_instance = nullptr;

// A child forked without exec has none of its parent's threads: it starts its own spawn
// thread when it spawns (the parent's, its lock and queue are left behind, never freed).
void forget_in_child() {
  g_instance_mutex = PTHREAD_MUTEX_INITIALIZER;
  g_instance = nullptr;
}

}  // namespace

struct SpawnThread::State {
  struct Job {
    const std::function<void()>* work;
    bool done = false;
  };
  std::mutex mutex;
  std::condition_variable wake, finished;
  std::deque<Job*> queue;
};

SpawnThread& SpawnThread::instance() {
  pthread_mutex_lock(&g_instance_mutex);
  if (g_instance == nullptr) {
    static const int registered = pthread_atfork(nullptr, nullptr, forget_in_child);
    (void)registered;
    g_instance = new SpawnThread;  // never destroyed, on purpose
  }
  SpawnThread* instance = g_instance;
  pthread_mutex_unlock(&g_instance_mutex);
  return *instance;
}

SpawnThread::SpawnThread() : state_(new State) {
  // Every signal blocked: handlers run on other threads, and a forked child starts with all
  // of them blocked until it has reset their dispositions (ChildProcess::spawn).
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  std::thread([state = state_] {
    std::unique_lock lock(state->mutex);
    for (;;) {
      state->wake.wait(lock, [&] { return !state->queue.empty(); });
      State::Job* job = state->queue.front();
      state->queue.pop_front();
      lock.unlock();
      (*job->work)();
      lock.lock();
      job->done = true;
      state->finished.notify_all();
    }
  }).detach();
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

void SpawnThread::run(const std::function<void()>& work) {
  State::Job job{&work};
  std::unique_lock lock(state_->mutex);
  state_->queue.push_back(&job);
  state_->wake.notify_one();
  state_->finished.wait(lock, [&] { return job.done; });
}

}  // namespace hearth
