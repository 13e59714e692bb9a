// The gateway's worker pool with real processes: one worker per (model, profile), shared by
// every request for it; a profile nobody configured or a model the server does not serve is
// refused with the status the client will see; a worker that dies is started again by the next
// request, and only that one is counted as a restart.

#include <gtest/gtest.h>

#include <signal.h>

#include "gateway/api_error.h"
#include "tests/gateway/api_error_of.h"
#include "tests/gateway/served_workers.h"
#include "tests/ipc/test_util.h"
#include "tests/proof/proof_test_util.h"

namespace hearth::gateway {
namespace {

TEST(WorkerPool, RequestsForOneModelShareOneWorker) {
  ServedWorkers w;
  const auto first = w.pool.get("tiny", "");
  ASSERT_TRUE(first && first->alive());
  EXPECT_EQ(w.pool.get("tiny", ""), first);
  const WorkerPoolStats s = w.pool.stats();
  EXPECT_EQ(s.alive, 1);
  EXPECT_EQ(s.starts, 1);
  EXPECT_EQ(s.restarts, 0);
  ASSERT_EQ(w.pool.connections().size(), 1u);
  EXPECT_EQ(w.pool.connections()[0].model, "tiny");
}

TEST(WorkerPool, AnUnknownProfileIsA404AndStartsNothing) {
  ServedWorkers w;
  const ApiError e = error_of([&] { w.pool.get("tiny", "fast"); });
  EXPECT_EQ(e.status(), 404) << e.what();
  EXPECT_EQ(e.param(), "model");
  EXPECT_NE(std::string(e.what()).find("'fast'"), std::string::npos) << e.what();
  EXPECT_EQ(w.pool.stats().starts, 0);
}

// Issue 24 item 6: this was a 503 with Retry-After (a permanent error clients retried forever)
// naming a log that the gateway deletes at exit. Now a 500 without Retry-After that says the
// worker's own last words.
TEST(WorkerPool, AWorkerThatCannotStartIsA500SayingWhy) {
  ServedWorkers w;
  // The server does not serve "absent": the worker exits at startup, and says why in its log.
  const ApiError e = error_of([&] { w.pool.get("absent", ""); });
  EXPECT_EQ(e.status(), 500) << e.what();
  EXPECT_FALSE(e.retry_after_s()) << e.what();
  EXPECT_NE(std::string(e.what()).find("failed to start"), std::string::npos) << e.what();
  const std::string log = test::read_file((w.runtime / "worker-absent-default-1.log").string());
  ASSERT_FALSE(log.empty());
  std::string last = log.substr(0, log.find_last_not_of('\n') + 1);
  last = last.substr(last.rfind('\n') + 1);
  EXPECT_NE(std::string(e.what()).find(last), std::string::npos) << e.what() << "\n" << log;
  EXPECT_EQ(std::string(e.what()).find(w.runtime.path().string()), std::string::npos) << e.what();
  EXPECT_EQ(w.pool.stats().alive, 0);
}

// A worker binary that cannot run is as permanent: a 500, never Retry-After.
TEST(WorkerPool, AWorkerBinaryThatCannotRunIsA500WithoutRetryAfter) {
  test::TempDir runtime;
  WorkerPoolOptions o = test_pool_options("/nonexistent.sock", runtime.path());
  o.worker_binary = runtime / "no-such-worker";
  WorkerPool pool(std::move(o));
  const ApiError e = error_of([&] { pool.get("tiny", ""); });
  EXPECT_EQ(e.status(), 500) << e.what();
  EXPECT_FALSE(e.retry_after_s()) << e.what();
}

TEST(WorkerPool, ADeadWorkerIsStartedAgainByTheNextRequest) {
  ServedWorkers w;
  const auto first = w.pool.get("tiny", "");
  const std::vector<pid_t> workers =
      proof::testing::processes_mentioning(w.runtime.path().string());
  ASSERT_EQ(workers.size(), 1u);
  ASSERT_EQ(::kill(workers[0], SIGKILL), 0);
  ASSERT_TRUE(test::eventually([&] { return !first->alive(); }));

  const auto second = w.pool.get("tiny", "");
  ASSERT_TRUE(second && second->alive());
  EXPECT_NE(second, first);
  const WorkerPoolStats s = w.pool.stats();
  EXPECT_EQ(s.alive, 1);
  EXPECT_EQ(s.starts, 2);
  EXPECT_EQ(s.restarts, 1);
  // The new worker answers.
  EXPECT_NO_THROW(second->call("stats"));
}

}  // namespace
}  // namespace hearth::gateway
