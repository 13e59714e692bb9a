// The weight server a gateway starts for itself when it is given models rather than a running
// server's socket: started once, restarted if it dies (workers already attached keep their
// mappings; new workers need a server), stopped with the gateway.
#pragma once

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ipc/child_process.h"

namespace hearth::gateway {

struct SupervisorOptions {
  std::filesystem::path server_binary;      // hearth-server
  std::filesystem::path runtime_dir;        // the socket and the server's log go here
  std::vector<std::string> models;          // DIR[:NAME], as hearth-server --model takes them
  std::string backend = "auto";             // auto | vmm | memfd
  std::string quantize = "none";            // none | fp8, as hearth-server --quantize
  int tensor_parallel = 1;                  // as hearth-server --tensor-parallel (issue 26)
  std::chrono::seconds start_timeout{600};  // loading a large model from a cold disk takes time
  std::function<void(const std::string&)> log;
};

class ServerSupervisor {
 public:
  // Starts the server and waits until it serves every model. Throws with the server's last
  // log lines when it exits first.
  explicit ServerSupervisor(SupervisorOptions options);
  // SIGTERM, then SIGKILL after a grace period. Never waits on a restart in progress: the
  // restarted server, not yet ready, is killed and reaped.
  ~ServerSupervisor();

  const std::string& socket() const { return socket_; }

 private:
  void start();
  void watch();

  SupervisorOptions options_;
  std::string socket_;
  // Replaced only by start() (the constructor, then the watcher); read by the destructor once
  // the watcher has been joined.
  std::unique_ptr<ChildProcess> process_;
  std::mutex mutex_;
  std::condition_variable stop_cv_;
  // Set under mutex_ (for stop_cv_), read without it by a restart's readiness wait.
  std::atomic<bool> stopping_{false};
  std::thread watcher_;
};

}  // namespace hearth::gateway
