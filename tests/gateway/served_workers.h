// The gateway's worker side for one test, made of real processes: a hearth-server serving the
// tiny model as "tiny" (memfd), and a WorkerPool that starts hearth-worker --serve on it (CPU),
// with the model's catalog entry as the gateway would read it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "gateway/model_catalog.h"
#include "gateway/worker_pool.h"
#include "tests/support/temp_dir.h"
#include "tests/weight-server/daemon/server_test_support.h"

namespace hearth::gateway {

inline WorkerPoolOptions test_pool_options(const std::string& server_socket,
                                           const std::filesystem::path& runtime_dir) {
  WorkerPoolOptions o;
  o.worker_binary = test::binary("hearth-worker");
  o.server_socket = server_socket;
  o.runtime_dir = runtime_dir;
  o.start_timeout = std::chrono::seconds(60);
  o.extra_worker_args = {"--backend", "cpu"};
  return o;
}

struct ServedWorkers {
  test::ServerProcess server;
  test::TempDir runtime;  // the pool's worker sockets and logs
  ModelCatalog catalog = ModelCatalog::load(server.socket(), [](const std::string&) {});
  WorkerPool pool{test_pool_options(server.socket(), runtime.path())};

  const ModelEntry& tiny() const { return *catalog.find("tiny"); }
};

}  // namespace hearth::gateway
