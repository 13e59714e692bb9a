// The worker pool's reader threads never outlive it: a request's callback (a session's, which
// records into the gateway's Metrics) runs on its connection's reader, and the pool joins that
// reader before the connection is replaced and before its own destructor returns. Before, the
// reader could be left running detached (its last owner dropped on it), after the pool and
// whatever the callbacks touched were gone.
//
// Each test holds the request's last callback on the reader until the event it must never see
// (the pool gone, the new worker handed out) happens, or 2 s pass: with the reader joined, that
// event cannot happen first, so the bound only ends the wait; it is not what is asserted.

#include <gtest/gtest.h>

#include <signal.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "gateway/worker_connection.h"
#include "tests/gateway/served_workers.h"
#include "tests/ipc/test_util.h"
#include "tests/proof/proof_test_util.h"

namespace hearth::gateway {
namespace {

using json = nlohmann::json;

// What a request's last callback saw, shared between the reader and the test.
struct LastEvent {
  std::mutex mutex;
  std::condition_variable changed;
  bool after = false;      // the event the callback must not outlive happened
  bool ended = false;      // the request's last event was handled
  bool saw_after = false;  // the callback was still running when it happened
  std::string error;       // the last event's error

  // Run on the reader for the last event: waits for `after` (bounded), then records.
  void on_last(const json& event) {
    std::unique_lock lock(mutex);
    changed.wait_for(lock, std::chrono::seconds(2), [&] { return after; });
    saw_after = after;
    error = event.value("error", "");
    ended = true;
  }
  // Run by the test once the event happened; returns whether the request had ended by then.
  bool mark_after() {
    std::lock_guard lock(mutex);
    after = true;
    changed.notify_all();
    return ended;
  }
};

// A long request whose callback owns the connection, as a session does.
void submit_owned(std::shared_ptr<WorkerConnection> owner, std::shared_ptr<LastEvent> last) {
  WorkerConnection& c = *owner;
  const json request = {
      {"id", "r1"}, {"prompt", "Once upon"}, {"max_tokens", 400}, {"ignore_eos", true}};
  c.submit(request, [owner = std::move(owner), last](const json& event) {
    if (event.value("done", false)) last->on_last(event);
  });
}

// The pool stops its worker while a request runs: the worker's "shutting down" end reaches the
// callback, and the pool's destructor returns only after that callback has.
TEST(WorkerPoolShutdown, NoRequestCallbackRunsAfterThePoolIsGone) {
  ServedWorkers w;
  auto last = std::make_shared<LastEvent>();
  std::weak_ptr<WorkerConnection> connection;
  {
    test::TempDir runtime;
    auto pool = std::make_unique<WorkerPool>(test_pool_options(w.server.socket(), runtime.path()));
    std::shared_ptr<WorkerConnection> owner = pool->get("tiny", "");
    ASSERT_TRUE(owner);
    connection = owner;
    submit_owned(std::move(owner), last);
    pool.reset();
    EXPECT_TRUE(last->mark_after()) << "the pool was gone before its request heard its end";
    // Nothing holds the connection now: the callback that owned it was dropped on the reader,
    // which the pool had joined.
    EXPECT_TRUE(connection.expired());
  }
  std::lock_guard lock(last->mutex);
  EXPECT_FALSE(last->saw_after) << "a request callback ran after the pool was destroyed";
  EXPECT_NE(last->error.find("shutting down"), std::string::npos) << last->error;
}

// A worker killed mid-request: the next get() starts a new one, and hands it out only after the
// dead connection's reader (ending the request with an error) has finished.
TEST(WorkerPoolShutdown, ADeadWorkersReaderIsJoinedBeforeItsSlotStartsAgain) {
  ServedWorkers w;
  auto last = std::make_shared<LastEvent>();
  std::shared_ptr<WorkerConnection> first = w.pool.get("tiny", "");
  ASSERT_TRUE(first);
  std::weak_ptr<WorkerConnection> dead = first;
  submit_owned(std::move(first), last);
  const std::vector<pid_t> workers =
      proof::testing::processes_mentioning(w.runtime.path().string());
  ASSERT_EQ(workers.size(), 1u);
  ASSERT_EQ(::kill(workers[0], SIGKILL), 0);
  // Dead once its reader saw the end of the connection (the callback may be running by then).
  ASSERT_TRUE(test::eventually([&] {
    const auto c = dead.lock();
    return !c || !c->alive();
  }));

  const std::shared_ptr<WorkerConnection> second = w.pool.get("tiny", "");
  EXPECT_TRUE(last->mark_after()) << "a new worker was handed out while the dead one's reader ran";
  ASSERT_TRUE(second && second->alive());
  EXPECT_TRUE(dead.expired());
  std::lock_guard lock(last->mutex);
  EXPECT_FALSE(last->saw_after);
  EXPECT_FALSE(last->error.empty());
}

}  // namespace
}  // namespace hearth::gateway
