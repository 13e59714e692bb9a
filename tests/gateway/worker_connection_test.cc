// The gateway's connection to a serving worker, with real processes: a request's callback may
// hold the last owner of the connection (a session that outlived the pool, as at a gateway's
// shutdown), so the connection can be destroyed on its own reader thread by the final event.

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "gateway/worker_connection.h"
#include "tests/gateway/served_workers.h"
#include "tests/ipc/test_util.h"

namespace hearth::gateway {
namespace {

using json = nlohmann::json;

// The pool stops its worker (SIGTERM) while a request runs; the worker ends the request with a
// "shutting down" event, whose callback drops the last owner of the connection on the reader.
// The reader must touch nothing more (before the fix, ASan caught it polling for events on the
// freed connection); the request ends with that error and the connection is freed.
TEST(WorkerConnection, TheFinalEventsCallbackMayDropItsLastOwner) {
  ServedWorkers w;
  std::weak_ptr<WorkerConnection> connection;
  auto ended = std::make_shared<std::string>();
  {
    test::TempDir runtime;
    WorkerPool pool{test_pool_options(w.server.socket(), runtime.path())};
    std::shared_ptr<WorkerConnection> owner = pool.get("tiny", "");
    ASSERT_TRUE(owner);
    connection = owner;
    WorkerConnection& c = *owner;
    const json request = {
        {"id", "r1"}, {"prompt", "Once upon"}, {"max_tokens", 400}, {"ignore_eos", true}};
    c.submit(request, [owner = std::move(owner), ended](const json& event) mutable {
      if (event.value("done", false)) *ended = event.value("error", "none");
    });
  }  // the pool and this scope's owners are gone: only the callback holds the connection
  EXPECT_TRUE(test::eventually([&] { return connection.expired(); }))
      << "the connection outlived its last request";
  EXPECT_NE(ended->find("shutting down"), std::string::npos) << *ended;
}

}  // namespace
}  // namespace hearth::gateway
