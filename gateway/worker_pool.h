// The gateway's batching workers: one `hearth-worker --serve` process per (model, engine
// profile), started when the first request needs it, on the weight server's shared weights.
// A worker that dies fails only its own requests (its connection ends them with an error
// event) and is started again by the next request; an idle worker exits by itself and is
// started again the same way.
//
// Who owns what (the gateway's shutdown depends on it): the pool owns each worker process and
// holds a reference to every connection it made until that connection's reader thread is
// joined (WorkerConnection::close). Sessions share a connection too, and a session's callbacks
// (run on the reader) may hold its last other owner, but never the last one while the pool is
// alive: a replaced connection is closed by the start that replaces it, and the destructor
// closes the rest after its workers stop. So when ~WorkerPool returns, no reader thread runs
// and no callback can touch what the sessions point at (Metrics, the model catalog): those must
// only outlive the pool (gateway_main declares them before it).
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gateway/worker_connection.h"
#include "ipc/child_process.h"

namespace hearth::gateway {

struct WorkerPoolOptions {
  std::filesystem::path worker_binary;  // hearth-worker
  std::string server_socket;            // the weight server the workers attach to
  std::filesystem::path runtime_dir;    // private (0700): worker sockets and logs
  // Engine profiles by name; "" is the default profile (no file: the worker's defaults).
  std::map<std::string, std::filesystem::path> profiles;
  // A profile's context_length, where it sets one (read at startup): the gateway checks a
  // request against it, as the worker would, and answers in OpenAI's terms.
  std::map<std::string, int> profile_context_lengths;
  // Tensor parallelism (issue 26): each profile's tensor_parallel (read at startup; absent: 1)
  // and each model's degree as its server sharded it (absent: 1). On a sharded model a profile
  // whose degree is not the model's is refused by name before any worker starts, and the
  // default profile takes the model's (`--set tensor_parallel=N`); on an unsharded one a
  // profile's ranks cut their own pieces.
  std::map<std::string, int> profile_tensor_parallel;
  std::map<std::string, int> model_tensor_parallel;
  std::chrono::seconds idle_exit{300};          // a worker with nothing to do exits after this
  std::chrono::seconds start_timeout{120};      // from spawn to accepting connections
  std::vector<std::string> extra_worker_args;   // e.g. --backend cpu in tests
  std::function<void(const std::string&)> log;  // progress and failures, one line each
};

// A live worker: what it serves, which process of its slot it is, its connection.
struct LiveWorker {
  std::string model, profile;
  int generation = 0;  // the slot's process count when it started: new process, new number
  std::shared_ptr<WorkerConnection> connection;
};

struct WorkerPoolStats {
  int alive = 0;
  int64_t starts = 0;    // processes started, first starts included
  int64_t restarts = 0;  // starts of a (model, profile) that had a worker before
};

class WorkerPool {
 public:
  explicit WorkerPool(WorkerPoolOptions options);
  // Stops every worker (SIGTERM, then SIGKILL after a grace period), then closes every
  // connection, joining its reader: no request callback runs after it returns.
  ~WorkerPool();

  // The connection to the worker for (model, profile), starting it if none is running. Throws
  // ApiError 404 for a profile not configured, 400 for a profile whose tensor_parallel is not
  // the model's sharding, 503 when the worker cannot be started.
  std::shared_ptr<WorkerConnection> get(const std::string& model, const std::string& profile);

  WorkerPoolStats stats();
  // The live workers (their last pushed stats, for /metrics). A worker being started again is
  // left out.
  std::vector<LiveWorker> connections();
  std::vector<std::string> profile_names() const;
  // The context a profile's workers run with: `model_context`, or the profile's if shorter.
  int context_length(const std::string& profile, int model_context) const;

 private:
  struct Slot {
    std::mutex mutex;  // held while its worker starts: its requests wait, others go on
    std::unique_ptr<ChildProcess> process;
    std::shared_ptr<WorkerConnection> connection;
    std::filesystem::path socket;
    int generation = 0;  // how many processes this slot has had
  };
  std::shared_ptr<WorkerConnection> start(const std::string& model, const std::string& profile,
                                          Slot& slot);
  // Throws ApiError 400 when the profile's tensor_parallel is not the model's sharding.
  void check_tensor_parallel(const std::string& model, const std::string& profile) const;

  WorkerPoolOptions options_;
  std::mutex mutex_;  // guards slots_ and the counters
  std::map<std::pair<std::string, std::string>, std::unique_ptr<Slot>> slots_;
  int64_t starts_ = 0, restarts_ = 0;
};

}  // namespace hearth::gateway
